"""faultline's driver for mini-swe-agent: runs its default agent, with its own bundled `mini.yaml`
prompts and bash tool, on one faultline task, inside the trial's sandbox, against the trial's
model gateway. faultline enforces the limits (the gateway counts every call), so the agent's own
step and cost limits are off; its trajectory is saved as `traj.json` in the output directory and
the submission written where faultline reads it."""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
# The sandbox has no network: litellm must not try to download its price list.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Cost is the gateway's to count; an unknown model must not stop the agent.
os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")

import yaml  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import builtin_config_dir  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402

task_dir = Path(os.environ["FAULTLINE_TASK_DIR"])
output_dir = Path(os.environ["FAULTLINE_OUTPUT_DIR"])
workspace = Path(os.environ["FAULTLINE_WORKSPACE"])
track = os.environ["FAULTLINE_TRACK"]
task = json.loads((task_dir / "task.json").read_text())
prompt = (task_dir / "prompt.md").read_text()

config = yaml.safe_load((builtin_config_dir / "mini.yaml").read_text())
agent_config = dict(config["agent"])
agent_config.pop("mode", None)
agent_config.pop("confirm_exit", None)
agent_config.update(step_limit=0, cost_limit=0, output_path=output_dir / "traj.json")

if os.environ.get("FAULTLINE_PROTOCOL") == "anthropic":
    model_name = "anthropic/" + os.environ["FAULTLINE_MODEL"]
    api_base, api_key = os.environ["ANTHROPIC_BASE_URL"], os.environ["ANTHROPIC_API_KEY"]
else:
    model_name = "openai/" + os.environ["FAULTLINE_MODEL"]
    api_base, api_key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
model_config = dict(config.get("model", {}))
model_config.update(
    model_name=model_name,
    model_kwargs={"api_base": api_base, "api_key": api_key, "drop_params": True},
    cost_tracking="ignore_errors",
)

environment = LocalEnvironment(
    cwd=str(workspace),
    timeout=int(task["limits"]["command_timeout_secs"]),
    env=config.get("environment", {}).get("env", {}),
)
agent = DefaultAgent(LitellmModel(**model_config), environment, **agent_config)
try:
    result = agent.run(prompt)
except Exception as error:  # the agent has saved its trajectory; faultline records why
    print(f"mini-swe-agent stopped: {type(error).__name__}: {error}", file=sys.stderr)
    sys.exit(2)

status = result.get("exit_status", "")
submission = result.get("submission", "")
print(f"mini-swe-agent exit status: {status}")
if status != "Submitted":
    sys.exit(1)
if track == "diagnose":
    text = submission.strip()
    if not text.startswith("{"):
        path = workspace / "diagnosis.json"
        text = path.read_text() if path.is_file() else ""
    (output_dir / "diagnosis.json").write_text(text)
elif track == "reproduce":
    text = submission
    if not text.strip():
        path = workspace / "tests" / "faultline_repro.rs"
        text = path.read_text() if path.is_file() else ""
    (output_dir / "reproducer.rs").write_text(text)
