//! Sessions: one sandbox kept alive, commands run through its supervisor.

use faultline_sandbox::{ExecRequest, Mount, Sandbox, SandboxSpec, Session};
use std::time::Duration;

async fn session(dir: &std::path::Path) -> Session {
    let spec = SandboxSpec::new(None, "/workspace").mount(Mount::rw(dir, "/workspace"));
    Sandbox::new(spec)
        .unwrap()
        .start_session_with(env!("CARGO_BIN_EXE_faultline-supervisor").as_ref())
        .await
        .unwrap()
}

#[tokio::test]
async fn commands_run_in_order_with_their_own_env_and_workdir() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let s = session(dir.path()).await;
    let out = s
        .exec(
            &ExecRequest::bash(
                "echo $$ $FOO; pwd; id -u; echo err >&2; exit 4",
                Duration::from_secs(10),
            )
            .env("FOO", "bar")
            .workdir("/workspace/sub"),
        )
        .await
        .unwrap();
    println!("{out:?}");
    assert_eq!(out.exit_code, Some(4));
    assert!(
        out.stdout.text.ends_with("bar\n/workspace/sub\n1000\n"),
        "{out:?}"
    );
    assert_eq!(out.stderr.text, "err\n");
    let out = s
        .exec(&ExecRequest::bash(
            "echo \"[$FOO]\"; pwd",
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
    assert_eq!(out.stdout.text, "[]\n/workspace\n");
    println!("{}", s.protections());
    s.close().await.unwrap();
}
