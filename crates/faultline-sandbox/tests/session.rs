//! Sessions: one sandbox kept alive, commands run through its supervisor with the semantics of
//! a one-shot exec.

use faultline_sandbox::{
    ExecOutput, ExecRequest, Mount, Sandbox, SandboxError, SandboxSpec, Session,
};
use std::time::{Duration, Instant};

const SUPERVISOR: &str = env!("CARGO_BIN_EXE_faultline-supervisor");

fn sandbox(dir: &std::path::Path) -> Sandbox {
    Sandbox::new(SandboxSpec::new(None, "/workspace").mount(Mount::rw(dir, "/workspace"))).unwrap()
}

async fn session(dir: &std::path::Path) -> Session {
    sandbox(dir)
        .start_session_with(SUPERVISOR.as_ref())
        .await
        .unwrap()
}

fn bash(script: &str) -> ExecRequest {
    ExecRequest::bash(script, Duration::from_secs(20))
}

#[tokio::test]
async fn commands_get_their_own_env_and_workdir_and_share_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let s = session(dir.path()).await;
    let out = s
        .exec(
            &bash("echo $FOO; pwd; id -u; echo err >&2; echo kept > /workspace/f; exit 4")
                .env("FOO", "bar")
                .workdir("/workspace/sub"),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(4), "{out:?}");
    assert_eq!(out.stdout.text, "bar\n/workspace/sub\n1000\n");
    assert_eq!(out.stderr.text, "err\n");
    let out = s.exec(&bash("echo \"[$FOO]\"; pwd; cat f")).await.unwrap();
    assert_eq!(out.stdout.text, "[]\n/workspace\nkept\n");
    assert!(s.protections().oom_first.is_active(), "{}", s.protections());
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_session_reports_what_a_one_shot_exec_reports() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox(dir.path());
    let s = sb.start_session_with(SUPERVISOR.as_ref()).await.unwrap();
    let key = |o: &ExecOutput| {
        (
            o.exit_code,
            o.signal,
            o.timed_out,
            o.stdout.clone(),
            o.stderr.clone(),
        )
    };
    for req in [
        bash("kill -SEGV $$"),
        bash("exit 300"),
        bash("seq 1 5000; seq 1 3000 >&2").cap(100),
        bash("printf 'a\\xffb'"),
        ExecRequest::argv(["/no/such/program"], Duration::from_secs(5)),
        ExecRequest::bash("sleep 30", Duration::from_millis(300)),
    ] {
        let one_shot = sb.exec(&req).await.unwrap();
        let session = s.exec(&req).await.unwrap();
        if req.argv[0] == "/no/such/program" {
            // Both refuse it, in the words of bubblewrap (or of the shell that closes inherited
            // descriptors, when there are some) or of the supervisor.
            for out in [&one_shot, &session] {
                assert!(matches!(out.exit_code, Some(1 | 127)), "{out:?}");
                assert!(out.stderr.text.contains("No such file"), "{out:?}");
            }
            continue;
        }
        assert_eq!(key(&one_shot), key(&session), "{:?}", req.argv);
    }
}

#[tokio::test]
async fn tmpfs_files_persist_between_commands_but_processes_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let out = s
        .exec(&bash("echo x > /tmp/note; sleep 600 & echo started"))
        .await
        .unwrap();
    assert_eq!(out.stdout.text, "started\n");
    let out = s
        .exec(&bash("cat /tmp/note; pgrep -c sleep"))
        .await
        .unwrap();
    assert_eq!(out.stdout.text, "x\n0\n", "{out:?}");
}

#[tokio::test]
async fn concurrent_execs_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let (first, second) = (bash("sleep 0.3; echo a"), bash("sleep 0.3; echo b"));
    let start = Instant::now();
    let (a, b) = tokio::join!(s.exec(&first), s.exec(&second));
    assert_eq!(a.unwrap().stdout.text, "a\n");
    assert_eq!(b.unwrap().stdout.text, "b\n");
    assert!(start.elapsed() >= Duration::from_millis(600));
}

#[tokio::test]
async fn an_abandoned_exec_ends_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let abandoned =
        tokio::time::timeout(Duration::from_millis(200), s.exec(&bash("sleep 30"))).await;
    assert!(abandoned.is_err());
    let err = s.exec(&bash("echo hi")).await.unwrap_err();
    assert!(matches!(err, SandboxError::SessionLost(_)), "{err}");
}

#[tokio::test]
async fn a_missing_supervisor_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = sandbox(dir.path())
        .start_session_with("/no/such/supervisor".as_ref())
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::NoSupervisor(_)), "{err}");
    assert!(
        err.to_string().contains("cargo build -p faultline-sandbox"),
        "{err}"
    );
}

#[tokio::test]
async fn the_supervisor_refuses_to_run_outside_a_sandbox() {
    let out = std::process::Command::new(SUPERVISOR).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("PID 1"),
        "{out:?}"
    );
}
