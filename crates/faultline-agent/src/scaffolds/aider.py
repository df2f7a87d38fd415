"""faultline's driver for aider: runs aider once, non-interactively, on one faultline repair task,
inside the trial's sandbox, against the trial's model gateway, with its SEARCH/REPLACE edit
format and the crate's tests as its test command. The repair is what aider leaves in the
workspace. aider is a code editor, not a shell agent, so only the repair track is run."""

import json
import os
import subprocess
import sys
from pathlib import Path

# Sources added to aider's chat whole, when they fit; past this, aider is given none and asks
# for the files it wants (it has no repository map without git).
SOURCE_BUDGET_BYTES = 100_000

task_dir = Path(os.environ["FAULTLINE_TASK_DIR"])
output_dir = Path(os.environ["FAULTLINE_OUTPUT_DIR"])
workspace = Path(os.environ["FAULTLINE_WORKSPACE"])
if os.environ["FAULTLINE_TRACK"] != "repair":
    print("aider is run on the repair track only", file=sys.stderr)
    sys.exit(3)
task = json.loads((task_dir / "task.json").read_text())

context = ""
if (task_dir / "context").is_dir():
    for path in sorted((task_dir / "context").glob("*.md")):
        context += f'\n<context file="{path.name}">\n{path.read_text().strip()}\n</context>\n'
message = (
    f"A user reported a failure in the `{task['crate_name']}` crate in this directory. Find the "
    "cause and fix it in the crate's source (under `src/`). Changes to tests, manifests and build "
    "scripts are not part of the fix. Keep the crate's existing behaviour otherwise.\n\n"
    f"<report>\n{(task_dir / 'symptom.md').read_text().strip()}\n</report>\n"
    + (f"\nDebugging context captured from the failing scenario:\n{context}" if context else "")
)

sources = sorted(str(p.relative_to(workspace)) for p in (workspace / "src").rglob("*.rs"))
if sum((workspace / p).stat().st_size for p in sources) > SOURCE_BUDGET_BYTES:
    sources = []

if os.environ.get("FAULTLINE_PROTOCOL") == "anthropic":
    model = ["--model", "anthropic/" + os.environ["FAULTLINE_MODEL"],
             "--anthropic-api-key", os.environ["ANTHROPIC_API_KEY"]]
else:
    model = ["--model", "openai/" + os.environ["FAULTLINE_MODEL"],
             "--openai-api-base", os.environ["OPENAI_BASE_URL"],
             "--openai-api-key", os.environ["OPENAI_API_KEY"]]
command = [
    sys.executable, "-m", "aider", *model,
    "--yes-always", "--no-git", "--no-auto-commits", "--no-show-model-warnings",
    "--no-check-update", "--analytics-disable", "--no-pretty", "--no-stream", "--no-fancy-input",
    "--edit-format", "diff", "--no-auto-lint",
    "--auto-test", "--test-cmd", "cargo test --quiet 2>&1 | tail -60",
    "--chat-history-file", str(output_dir / "aider.chat.history.md"),
    "--input-history-file", "/tmp/aider.input.history",
    "--llm-history-file", str(output_dir / "aider.llm.history"),
    "--message", message, *sources,
]
environment = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
sys.exit(subprocess.call(command, cwd=workspace, env=environment))
