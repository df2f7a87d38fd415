//! These tests run real bubblewrap sandboxes.

use faultline_sandbox::{ExecRequest, Mount, Sandbox, SandboxSpec, Toolchain, check_available};
use std::time::{Duration, Instant};

fn sandbox_with(dir: &std::path::Path) -> Sandbox {
    let spec = SandboxSpec::new(Some(Toolchain::detect().unwrap()), "/workspace")
        .mount(Mount::rw(dir, "/workspace"));
    Sandbox::new(spec).unwrap()
}

async fn run(sb: &Sandbox, script: &str) -> faultline_sandbox::ExecOutput {
    sb.exec(&ExecRequest::bash(script, Duration::from_secs(30)))
        .await
        .unwrap()
}

#[tokio::test]
async fn bubblewrap_is_available() {
    check_available().await.unwrap();
}

#[tokio::test]
async fn workspace_is_writable_and_lands_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox_with(dir.path());
    let out = run(&sb, "echo hi > note.txt && id -u && pwd").await;
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout.text, "1000\n/workspace\n");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "hi\n"
    );
}

#[tokio::test]
async fn read_only_mounts_and_system_dirs_reject_writes() {
    let dir = tempfile::tempdir().unwrap();
    let ro = tempfile::tempdir().unwrap();
    std::fs::write(ro.path().join("f"), "x").unwrap();
    let spec = SandboxSpec::new(None, "/workspace")
        .mount(Mount::rw(dir.path(), "/workspace"))
        .mount(Mount::ro(ro.path(), "/vendor"));
    let sb = Sandbox::new(spec).unwrap();
    for target in ["/vendor/f", "/usr/evil", "/etc/evil", "/opt/evil"] {
        let out = run(&sb, &format!("echo x > {target}")).await;
        assert!(!out.success(), "write to {target} succeeded");
    }
    assert_eq!(std::fs::read_to_string(ro.path().join("f")).unwrap(), "x");
}

#[tokio::test]
async fn the_host_home_and_environment_are_not_visible() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox_with(dir.path());
    let out = run(
        &sb,
        "ls /root 2>&1; echo \"[$CARGO_HOME][$RUSTUP_HOME]\"; ls /",
    )
    .await;
    assert!(
        out.stdout.text.contains("No such file"),
        "{}",
        out.stdout.text
    );
    assert!(out.stdout.text.contains("[][]"), "{}", out.stdout.text);
    assert!(!out.stdout.text.contains("work\n"), "{}", out.stdout.text);
}

#[tokio::test]
async fn there_is_no_network() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox_with(dir.path());
    let out = run(
        &sb,
        "ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1",
    )
    .await;
    assert_eq!(out.stdout.text.trim(), "lo", "{out:?}");
}

#[tokio::test]
async fn the_toolchain_runs_inside() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox_with(dir.path());
    let out = run(&sb, "cargo --version && rustc --print sysroot").await;
    assert!(out.success(), "{out:?}");
    assert!(out.stdout.text.contains("/opt/rust"), "{}", out.stdout.text);
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_tree() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox_with(dir.path());
    let marker = format!("faultline-sleep-{}", std::process::id());
    let start = Instant::now();
    let out = sb
        .exec(&ExecRequest::bash(
            format!("(exec -a {marker} sleep 300) & (exec -a {marker} sleep 301) & wait"),
            Duration::from_millis(500),
        ))
        .await
        .unwrap();
    assert!(out.timed_out);
    assert!(start.elapsed() < Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&ps.stdout);
    assert!(!listing.contains(&marker), "survivors:\n{listing}");
}

#[tokio::test]
async fn large_output_is_capped() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox_with(dir.path());
    let out = sb
        .exec(&ExecRequest::bash("seq 1 200000", Duration::from_secs(30)).cap(1000))
        .await
        .unwrap();
    assert!(out.success());
    assert!(out.stdout.text.starts_with("1\n2\n"));
    assert!(out.stdout.text.ends_with("199999\n200000\n"));
    assert!(out.stdout.elided_chars > 1_000_000);
}

#[tokio::test]
async fn exit_codes_and_stderr_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox_with(dir.path());
    let out = run(&sb, "echo oops >&2; exit 3").await;
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(out.stderr.text, "oops\n");
}

#[tokio::test]
async fn files_move_between_directories_and_tmp_as_builds_move_them() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox_with(dir.path());
    let out = run(
        &sb,
        "cd /workspace && mkdir -p a b && echo x > a/f && mv a/f b/f && ln b/f a/g && \
         echo y > /tmp/t && mv /tmp/t /workspace/t && cat b/f t",
    )
    .await;
    assert_eq!(out.stdout.text, "x\ny\n", "{out:?}");
}
