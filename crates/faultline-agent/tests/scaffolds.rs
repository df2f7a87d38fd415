//! The real mini-swe-agent and aider packages (installed from the Python package registry into a
//! directory under `target/` and reused), each run by our driver in the trial's sandbox, against
//! a scripted model server through the trial's gateway, on the fixture case.

mod common;

mod needs_pypi {
    use super::common::{self, MODEL, fixture, tool};
    use faultline_agent::scaffolds::python::Package;
    use faultline_agent::scaffolds::{aider, mini_swe_agent};
    use faultline_agent::{GatewayModel, TrialEnv, TrialResult};
    use faultline_model::{ApiKey, ModelClient, ModelConfig, Protocol};
    use faultline_schema::{ActionKind, ExitStatus, Limits, Submission, Track};
    use faultline_scripted::{Script, ScriptedServer, Step};
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    /// A release, installed once for all the tests of this binary (and kept for later runs).
    fn installed(package: &Package) -> PathBuf {
        static LOCK: Mutex<()> = Mutex::new(());
        let _one_at_a_time = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pypi");
        package.install(&root).unwrap_or_else(|e| {
            panic!(
                "{e:#}\n(this test installs {} from the Python package registry; \
                 `cargo test -- --skip needs_pypi::` leaves it out)",
                package.name
            )
        })
    }

    async fn run(script: Vec<Step>, track: Track) -> (TrialResult, String, ScriptedServer) {
        run_package(&mini_swe_agent::PACKAGE, script, track).await
    }

    async fn run_package(
        package: &Package,
        script: Vec<Step>,
        track: Track,
    ) -> (TrialResult, String, ScriptedServer) {
        let dir = installed(package);
        let f = fixture().await;
        let server = ScriptedServer::start(Script::new(script)).await.unwrap();
        let mut config =
            ModelConfig::new(Protocol::OpenAiChat, MODEL).with_base_url(server.openai_base_url());
        config.retry.max_retries = 0;
        let client = ModelClient::with_resolved_api_key(config, Some(ApiKey::new("sk-real")));
        let agent = package.agent(
            &dir,
            Some(GatewayModel {
                client: Arc::new(client.unwrap()),
                pricing: Some(common::pricing()),
            }),
        );
        let limits = Limits {
            wall_secs: 300,
            ..Limits::default()
        };
        let task = common::task(f, track, limits);
        let env = TrialEnv::create(
            &f.case,
            &f.prepared,
            task,
            Vec::new(),
            &f.data,
            &f.toolchain,
        )
        .unwrap();
        let out = tempfile::tempdir().unwrap();
        let trial = faultline_schema::RunDir::new(out.path()).trial("t");
        let result = agent.run(&env, &trial, None).await.unwrap();
        let log = std::fs::read_to_string(trial.agent_log_path()).unwrap_or_default();
        (result, log, server)
    }

    #[tokio::test]
    async fn a_scripted_episode_that_fixes_the_bug_submits_the_fix() {
        let fix = r"sed -i 's/\*mine += \*count;/*mine = (*mine).max(*count);/' src/lib.rs";
        let script = vec![
            tool("grep -n 'fn merge' src/lib.rs", 500, 20),
            tool(fix, 600, 30),
            tool(&format!("echo {}", mini_swe_agent::SENTINEL), 700, 10),
        ];
        let (r, log, server) = run(script, Track::Repair).await;
        assert_eq!(r.trajectory.exit_status, ExitStatus::Submitted, "{log}");
        assert!(
            matches!(&r.submission, Submission::Patch(p) if p.contains("max(*count)")),
            "{:?}\n{log}",
            r.submission
        );
        assert_eq!(server.requests().len(), 3);
        let steps = &r.trajectory.steps;
        assert_eq!(steps.len(), 3);
        let action = steps[1]
            .action
            .as_ref()
            .expect("the edit is attached to its call");
        assert!(action.command.contains("sed -i"));
        assert_eq!(action.kind, ActionKind::Edit);
        assert_eq!(action.exit_code, Some(0));
        assert!(
            steps[0]
                .action
                .as_ref()
                .unwrap()
                .output
                .contains("fn merge"),
            "{steps:?}"
        );
        let totals = &r.trajectory.totals;
        assert_eq!(totals.steps_to_first_edit, Some(2));
        assert_eq!(totals.tokens.input, 1800);
        assert!(totals.cost_usd.unwrap() > 0.0);
        assert_eq!(
            r.trajectory.agent.settings["scaffold"],
            format!("mini-swe-agent {}", mini_swe_agent::VERSION)
        );
    }

    #[tokio::test]
    async fn a_scripted_episode_that_submits_nothing_fails() {
        let script = vec![Step::text("I think it is fine."); 3];
        let (r, log, _server) = run(script, Track::Repair).await;
        assert_eq!(r.trajectory.exit_status, ExitStatus::AgentError, "{log}");
        assert!(
            matches!(r.submission, Submission::None),
            "{:?}",
            r.submission
        );
        assert!(
            r.trajectory.steps.iter().all(|s| s.format_error.is_some()),
            "{:?}",
            r.trajectory.steps
        );
    }

    #[tokio::test]
    async fn reading_the_answers_or_reaching_the_host_is_denied_and_recorded() {
        let f = fixture().await;
        let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let probe = format!(
            "ls {} ; ls {}; (exec 3<>/dev/tcp/127.0.0.1/{}) && echo HOST-REACHED",
            f.data.root.display(),
            std::path::absolute("../../corpus").unwrap().display(),
            host.local_addr().unwrap().port()
        );
        let script = vec![
            tool(&probe, 10, 1),
            tool(&format!("echo {}", mini_swe_agent::SENTINEL), 10, 1),
        ];
        let (r, log, _server) = run(script, Track::Repair).await;
        let action = r.trajectory.steps[0].action.as_ref().expect("recorded");
        assert_eq!(
            action.output.matches("No such file or directory").count(),
            2,
            "{action:?}\n{log}"
        );
        assert!(!action.output.contains("HOST-REACHED"), "{action:?}");
        assert_ne!(action.exit_code, Some(0));
    }

    /// An aider reply: one SEARCH/REPLACE edit of the fixture's merge.
    const AIDER_FIX: &str = "The merge adds counts where it must keep the larger one.\n\n\
        src/lib.rs\n```rust\n<<<<<<< SEARCH\n            *mine += *count;\n=======\n\
        \x20           *mine = (*mine).max(*count);\n>>>>>>> REPLACE\n```\n";

    #[tokio::test]
    async fn aider_applies_a_scripted_edit_and_its_tests_pass() {
        let (r, log, server) =
            run_package(&aider::PACKAGE, vec![Step::text(AIDER_FIX)], Track::Repair).await;
        assert_eq!(r.trajectory.exit_status, ExitStatus::Submitted, "{log}");
        assert!(
            matches!(&r.submission, Submission::Patch(p) if p.contains("max(*count)")),
            "{:?}\n{log}",
            r.submission
        );
        assert_eq!(server.requests().len(), 1, "{log}");
        assert_eq!(r.trajectory.totals.steps, 1);
        assert_eq!(
            r.trajectory.agent.settings["scaffold"],
            format!("aider {}", aider::PACKAGE.version)
        );
    }

    #[tokio::test]
    async fn aider_without_an_edit_submits_an_empty_patch() {
        let (r, log, _server) = run_package(
            &aider::PACKAGE,
            vec![Step::text("The code looks right to me.")],
            Track::Repair,
        )
        .await;
        assert!(
            matches!(&r.submission, Submission::Patch(p) if p.is_empty()),
            "{:?}\n{log}",
            r.submission
        );
    }

    /// aider runs no shell command on its own (`--yes-always` does not cover them) and edits
    /// files: an edit aimed at the host's data directory lands nowhere on the host.
    #[tokio::test]
    async fn an_aider_edit_aimed_at_the_host_lands_nowhere() {
        let f = fixture().await;
        let target = f.data.root.join("planted.rs");
        let reply = format!(
            "Adding a file.\n\n{}\n```rust\n<<<<<<< SEARCH\n=======\npub fn planted() {{}}\n\
             >>>>>>> REPLACE\n```\n",
            target.display()
        );
        let (_r, log, _server) =
            run_package(&aider::PACKAGE, vec![Step::text(&reply)], Track::Repair).await;
        assert!(log.contains("planted.rs"), "aider did not try:\n{log}");
        assert!(
            !target.exists(),
            "an agent's edit landed on the host:\n{log}"
        );
    }

    /// Opens every `*.traj.json` under a directory in mini-swe-agent's own inspector, headless,
    /// and walks every step of each; prints what it saw or fails.
    const INSPECT: &str = r#"
import asyncio, sys
from pathlib import Path
from minisweagent.run.utilities.inspector import TrajectoryInspector

async def main():
    files = sorted(Path(sys.argv[1]).rglob("*.traj.json"))
    app = TrajectoryInspector(files)
    async with app.run_test():
        for index in range(len(files)):
            app.i_trajectory = index
            assert app.messages, f"the inspector could not load {files[index].name}"
            for step in range(app.n_steps):
                app.i_step = step
            print(files[index].name, app.n_steps, "steps")
asyncio.run(main())
"#;

    /// Our exports, of a model agent's trajectory and of one without model calls, open in
    /// mini-swe-agent's inspector as a directory of `*.traj.json` files.
    #[tokio::test]
    async fn exported_trajectories_open_in_mini_swe_agents_inspector() {
        let dir = installed(&mini_swe_agent::PACKAGE);
        let script = vec![
            tool("ls src", 100, 10),
            tool(
                &format!("echo {}", faultline_agent::SUBMIT_SENTINEL),
                120,
                5,
            ),
        ];
        let limits = Limits {
            cost_usd: None,
            ..Limits::default()
        };
        let (result, _server) = common::run(
            script,
            Protocol::OpenAiChat,
            true,
            Track::Repair,
            limits.clone(),
            None,
        )
        .await;
        let f = fixture().await;
        let mut baseline = faultline_agent::record::Recorder::new(
            &common::task(f, Track::Diagnose, limits),
            faultline_schema::trajectory::AgentInfo {
                kind: faultline_schema::trajectory::AgentKind::Baseline,
                name: "null".into(),
                model: None,
                protocol: None,
                settings: Default::default(),
            },
            None,
        );
        baseline.finish(ExitStatus::Submitted, None, None).unwrap();
        let out = tempfile::tempdir().unwrap();
        for (name, t) in [
            ("model", &result.trajectory),
            ("baseline", &baseline.trajectory),
        ] {
            let exported = faultline_agent::export::to_mini_swe_agent(t, None);
            std::fs::write(
                out.path().join(format!("{name}.traj.json")),
                serde_json::to_vec(&exported).unwrap(),
            )
            .unwrap();
        }
        let inspected = std::process::Command::new(dir.join("venv/bin/python"))
            .args(["-c", INSPECT])
            .arg(out.path())
            .env("MSWEA_SILENT_STARTUP", "1")
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&inspected.stdout),
            String::from_utf8_lossy(&inspected.stderr)
        );
        assert!(inspected.status.success(), "{said}");
        assert!(said.contains("model.traj.json"), "{said}");
        assert!(said.contains("baseline.traj.json 1 steps"), "{said}");
    }
}
