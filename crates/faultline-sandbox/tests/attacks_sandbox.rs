//! Attacks a hostile agent could try, each run through a one-shot `Sandbox::exec` and through a
//! `Session`: every one must fail, show that it failed in the command's own output or status,
//! and leave the harness (this test process) unharmed.
//!
//! Set `FAULTLINE_REQUIRE_PROTECTIONS=1` (as CI does) to fail instead of skipping the attacks
//! whose protection the host cannot provide.

mod common;

use common::{SUPERVISOR, all_output, runners, workspace_spec};
use faultline_sandbox::{ExecRequest, Mount, ResourceLimits, Sandbox, SandboxError};
use faultline_testkit::{protected, required};
use std::io::Read;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Host processes whose command line contains `marker`.
fn host_processes_with(marker: &str) -> Vec<String> {
    let ps = std::process::Command::new("ps")
        .args(["-eo", "pid,stat,args"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&ps.stdout)
        .lines()
        .filter(|l| l.contains(marker) && !l.contains("ps -eo"))
        .map(String::from)
        .collect()
}

fn marker(test: &str) -> String {
    format!("faultline-attack-{}-{test}", std::process::id())
}

#[tokio::test]
async fn host_paths_that_are_not_mounted_cannot_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let secret = tempfile::tempdir().unwrap();
    std::fs::write(secret.path().join("oracle.rs"), "THE-HIDDEN-ORACLE").unwrap();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus");
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()));
    let targets = [
        secret.path().to_path_buf(),
        corpus.canonicalize().unwrap_or(corpus),
        home.clone(),
        home.join(".cargo/registry"),
        PathBuf::from("/root"),
        PathBuf::from("/work"),
        PathBuf::from("/etc/shadow"),
        PathBuf::from("/etc/ssl/private"),
        PathBuf::from("/home"),
    ];
    for r in runners(workspace_spec(dir.path())).await {
        for t in &targets {
            let t = t.display();
            let out = r
                .bash(&format!(
                    "ls -la '{t}' && echo LISTED; cat '{t}'/* '{t}' && echo READ; \
                     cat /proc/1/root/'{t}' && echo READ; find / -xdev -name oracle.rs 2>/dev/null"
                ))
                .await;
            let text = all_output(&out);
            assert!(
                !text.contains("LISTED") && !text.contains("READ"),
                "{}: reading {t} succeeded:\n{text}",
                r.name()
            );
            assert!(text.contains("No such file"), "{}: {t}:\n{text}", r.name());
            assert!(
                !text.contains("THE-HIDDEN-ORACLE"),
                "{}: {t}:\n{text}",
                r.name()
            );
        }
        let out = r.bash("ls /").await;
        let top: Vec<&str> = out.stdout.text.lines().collect();
        for absent in ["root", "home", "work", "srv", "mnt", "var", "boot"] {
            assert!(
                !top.contains(&absent),
                "{}: /{absent} is visible: {top:?}",
                r.name()
            );
        }
    }
}

#[tokio::test]
async fn the_network_is_unreachable_including_the_hosts_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    // The listener works from the host, so a failure inside is the sandbox's doing.
    drop(std::net::TcpStream::connect(("127.0.0.1", port)).unwrap());
    let (mut seen, _) = listener.accept().unwrap();
    let _ = seen.read(&mut [0u8; 1]);
    for r in runners(workspace_spec(dir.path())).await {
        let out = r
            .bash(&format!(
                "(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo CONNECTED-LOOPBACK; \
                 (timeout 3 bash -c 'exec 3<>/dev/tcp/192.0.2.1/80') && echo CONNECTED-OUT; \
                 (timeout 3 bash -c 'exec 3<>/dev/tcp/1.1.1.1/53') && echo CONNECTED-OUT; \
                 getent hosts example.com || echo NO-DNS; \
                 ip -o link 2>/dev/null | cut -d: -f2; cat /proc/net/dev | tail -n +3 | cut -d: -f1"
            ))
            .await;
        let text = all_output(&out);
        assert!(!text.contains("CONNECTED"), "{}:\n{text}", r.name());
        assert!(text.contains("Connection refused"), "{}:\n{text}", r.name());
        assert!(
            text.contains("Network is unreachable"),
            "{}:\n{text}",
            r.name()
        );
        assert!(text.contains("NO-DNS"), "{}:\n{text}", r.name());
        let ifaces: Vec<&str> = out.stdout.text.split_whitespace().collect();
        assert!(
            ifaces.iter().all(|i| *i == "lo" || i.starts_with("NO-")),
            "{}: {ifaces:?}",
            r.name()
        );
        match listener.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("{}: the host listener was reached: {other:?}", r.name()),
        }
    }
}

#[tokio::test]
async fn nothing_outside_the_workspace_can_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let ro = tempfile::tempdir().unwrap();
    std::fs::write(ro.path().join("f"), "original").unwrap();
    let spec = workspace_spec(dir.path()).mount(Mount::ro(ro.path(), "/vendor"));
    for r in runners(spec).await {
        for target in [
            "/evil",
            "/usr/evil",
            "/usr/bin/evil",
            "/etc/evil",
            "/etc/passwd",
            "/opt/evil",
            "/bin/evil",
            "/vendor/f",
            "/vendor/new",
            "/dev/evil",
            "/proc/sysrq-trigger",
            "/run/faultline-supervisor",
        ] {
            let out = r
                .bash(&format!(
                    "echo x > {target} && echo WROTE; mkdir {target}.d && echo MADE"
                ))
                .await;
            let text = all_output(&out);
            assert!(
                !text.contains("WROTE") && !text.contains("MADE"),
                "{}: wrote {target}:\n{text}",
                r.name()
            );
            assert!(
                [
                    "Read-only file system",
                    "Permission denied",
                    "No such file or directory"
                ]
                .iter()
                .any(|m| text.contains(m)),
                "{}: {target}:\n{text}",
                r.name()
            );
        }
        // Host-wide sysctls: the sandbox's uid is root's on the host here, which the kernel
        // lets write them. Only ever rewrite a value with itself, and only probe core_pattern.
        let out = r
            .bash(
                "test -w /proc/sys/kernel/core_pattern && echo CORE-PATTERN-WRITABLE; \
                 v=$(cat /proc/sys/fs/file-max) && echo $v > /proc/sys/fs/file-max && echo WROTE",
            )
            .await;
        let text = all_output(&out);
        assert!(
            !text.contains("WRITABLE") && !text.contains("WROTE"),
            "{}:\n{text}",
            r.name()
        );
        assert!(
            text.contains("Read-only file system"),
            "{}:\n{text}",
            r.name()
        );
        let out = r
            .bash("chmod 777 /vendor/f || mount -t tmpfs x /mnt || echo FAILED")
            .await;
        assert!(out.stdout.text.contains("FAILED"), "{}: {out:?}", r.name());
        let out = r.bash("echo ok > /workspace/ok && cat /workspace/ok").await;
        assert_eq!(out.stdout.text, "ok\n", "{}", r.name());
    }
    assert_eq!(
        std::fs::read_to_string(ro.path().join("f")).unwrap(),
        "original"
    );
    assert!(!ro.path().join("new").exists());
}

#[tokio::test]
async fn the_harness_and_the_sandboxs_init_cannot_be_signalled() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let mut bystander = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let bystander_pid = bystander.id();
    for r in runners(workspace_spec(dir.path())).await {
        let out = r
            .bash(&format!(
                "kill -9 {me} {bystander_pid}; echo kill-host=$?; \
                 kill -9 1; kill -STOP 1; kill -TERM 1; kill -HUP 1; kill -INT 1; \
                 sleep 300 & kill -9 -1; echo kill-all=$?; wait; echo still-here"
            ))
            .await;
        let text = all_output(&out);
        assert!(text.contains("No such process"), "{}:\n{text}", r.name());
        assert!(text.contains("kill-host=1"), "{}:\n{text}", r.name());
        assert!(text.contains("still-here"), "{}:\n{text}", r.name());
        assert_eq!(out.exit_code, Some(0), "{}: {out:?}", r.name());
        // The sandbox still works afterwards (for a session: the same supervisor).
        let out = r.bash("echo alive").await;
        assert_eq!(out.stdout.text, "alive\n", "{}", r.name());
    }
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "the bystander was killed"
    );
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}

#[tokio::test]
async fn a_fork_bomb_is_bounded_and_ends_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // A lower limit than the default, so the bomb reaches it within the timeout however loaded
    // the machine is; the mechanism is the same.
    let spec = workspace_spec(dir.path()).limits(ResourceLimits {
        max_processes: Some(200),
        ..ResourceLimits::default()
    });
    let sb = Sandbox::new(spec.clone()).unwrap();
    if !protected(&sb.protections().process_limit, "fork bomb") {
        return;
    }
    let weighted = protected(&sb.protections().cpu_weight, "CPU weight");
    for r in runners(spec).await {
        let mark = marker(&format!("bomb-{}", r.name()));
        let timeout = Duration::from_secs(3);
        // Meanwhile the host keeps starting processes, and must not wait long for a CPU.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let host = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut worst = Duration::ZERO;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let t = Instant::now();
                    std::process::Command::new("true").status().unwrap();
                    worst = worst.max(t.elapsed());
                    std::thread::sleep(Duration::from_millis(50));
                }
                worst
            }
        });
        let start = Instant::now();
        let out = r
            .run(&ExecRequest::bash(
                format!("# {mark}\nbomb() {{ bomb | bomb & }}; bomb; sleep 100"),
                timeout,
            ))
            .await;
        let took = start.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let worst = host.join().unwrap();
        if weighted {
            assert!(
                worst < Duration::from_secs(3),
                "{}: the host waited {worst:?}",
                r.name()
            );
        }
        assert!(out.timed_out, "{}: {out:?}", r.name());
        assert!(out.process_limit_hit, "{}: {out:?}", r.name());
        assert!(
            took < timeout + Duration::from_secs(5),
            "{}: took {took:?}",
            r.name()
        );
        assert!(
            all_output(&out).contains("Resource temporarily unavailable"),
            "{}: {out:?}",
            r.name()
        );
        let survivors = host_processes_with(&mark);
        assert!(
            survivors.is_empty(),
            "{}: survivors:\n{survivors:#?}",
            r.name()
        );
        let out = r.bash("echo recovered").await;
        assert_eq!(out.stdout.text, "recovered\n", "{}", r.name());
    }
}

#[tokio::test]
async fn filling_tmp_and_other_tmpfs_stops_at_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = workspace_spec(dir.path()).limits(ResourceLimits {
        tmp_bytes: Some(8 << 20),
        tmpfs_bytes: Some(4 << 20),
        shm_bytes: Some(2 << 20),
        ..ResourceLimits::default()
    });
    spec.tmpfs.push("/scratch".into());
    let sb = Sandbox::new(spec.clone()).unwrap();
    if !protected(&sb.protections().tmpfs_caps, "tmpfs filling") {
        return;
    }
    for r in runners(spec.clone()).await {
        for (target, cap) in [
            ("/tmp", 8u64 << 20),
            ("/scratch", 4 << 20),
            ("/dev/shm", 2 << 20),
        ] {
            let out = r
                .bash(&format!(
                    "head -c 64M /dev/zero > {target}/fill; echo status=$?; stat -c %s {target}/fill; \
                     rm {target}/fill"
                ))
                .await;
            let text = all_output(&out);
            assert!(
                text.contains("No space left on device"),
                "{}: {target}:\n{text}",
                r.name()
            );
            assert!(text.contains("status=1"), "{}: {target}:\n{text}", r.name());
            let written: u64 = out.stdout.text.lines().nth(1).unwrap().parse().unwrap();
            assert!(written <= cap, "{}: {target}: {written} > {cap}", r.name());
        }
        // No way around the caps: no nested user namespace to mount a tmpfs of one's own.
        let out = r
            .bash("unshare -Urm sh -c 'mount -t tmpfs x /mnt && echo MOUNTED'")
            .await;
        assert!(
            !all_output(&out).contains("MOUNTED"),
            "{}: {out:?}",
            r.name()
        );
        assert!(!out.success(), "{}: {out:?}", r.name());
    }
}

/// The peak resident memory of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .parse()
        .unwrap();
    kb * 1024
}

#[tokio::test]
async fn printing_100_mb_keeps_memory_bounded_and_counts_what_was_cut() {
    let dir = tempfile::tempdir().unwrap();
    let before = peak_rss();
    for r in runners(workspace_spec(dir.path())).await {
        let out = r
            .run(
                &ExecRequest::bash(
                    "printf START; head -c 100000000 /dev/zero | tr '\\0' a; printf END",
                    Duration::from_secs(60),
                )
                .cap(1000),
            )
            .await;
        assert!(out.success(), "{}: {out:?}", r.name());
        let s = &out.stdout;
        assert_eq!(s.total_bytes, 100_000_008, "{}", r.name());
        assert_eq!(s.total_chars, 100_000_008, "{}", r.name());
        assert_eq!(s.elided_chars, 100_000_008 - 1000, "{}", r.name());
        assert!(s.text.starts_with("STARTaaa"), "{}", r.name());
        assert!(s.text.ends_with("aaaEND"), "{}", r.name());
        assert!(
            s.text
                .contains("[... 99999008 characters elided; 100000008 in all ...]")
        );
        assert!(s.text.len() < 1100, "{}: {}", r.name(), s.text.len());
    }
    let grew = peak_rss().saturating_sub(before);
    assert!(grew < 40 << 20, "peak memory grew by {grew} bytes");
}

#[tokio::test]
async fn binary_output_is_rendered_lossily_and_flagged() {
    let dir = tempfile::tempdir().unwrap();
    for r in runners(workspace_spec(dir.path())).await {
        let out = r
            .bash("printf 'ok\\xff\\xfe\\x00\\x80end'; printf '\\xc3' >&2")
            .await;
        assert!(
            out.stdout.lossy && out.stderr.lossy,
            "{}: {out:?}",
            r.name()
        );
        assert_eq!(out.stdout.total_bytes, 9, "{}", r.name());
        assert!(
            out.stdout.text.starts_with("ok\u{fffd}"),
            "{}: {out:?}",
            r.name()
        );
        assert!(out.stdout.text.ends_with("end"), "{}: {out:?}", r.name());
        assert_eq!(out.stderr.text, "\u{fffd}", "{}", r.name());
    }
}

#[tokio::test]
async fn a_command_that_never_ends_is_killed_with_everything_it_started() {
    let dir = tempfile::tempdir().unwrap();
    for r in runners(workspace_spec(dir.path())).await {
        let mark = marker(&format!("forever-{}", r.name()));
        let start = Instant::now();
        let out = r
            .run(&ExecRequest::bash(
                format!(
                    "(exec -a {mark} sleep 1000) & setsid bash -c 'exec -a {mark} sleep 1000' & \
                     nohup bash -c 'trap \"\" TERM HUP; exec -a {mark} sleep 1000' >/dev/null 2>&1 & \
                     disown -a; echo started; while :; do :; done"
                ),
                Duration::from_millis(800),
            ))
            .await;
        assert!(out.timed_out, "{}: {out:?}", r.name());
        assert_eq!(out.signal, Some(9), "{}: {out:?}", r.name());
        assert_eq!(out.stdout.text, "started\n", "{}: {out:?}", r.name());
        assert!(start.elapsed() < Duration::from_secs(5), "{}", r.name());
        // Checked the moment exec returns: nothing may still be running.
        let survivors = host_processes_with(&mark);
        assert!(
            survivors.is_empty(),
            "{}: survivors:\n{survivors:#?}",
            r.name()
        );
    }
}

#[tokio::test]
async fn session_commands_cannot_reach_the_supervisor_or_outlive_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let sb = Sandbox::new(workspace_spec(dir.path())).unwrap();
    let s = sb.start_session_with(SUPERVISOR.as_ref()).await.unwrap();
    // Its channel and memory: /proc/1/fd would let a command read other requests or forge
    // replies, ptrace would let it take the supervisor over.
    let out = s
        .exec(&ExecRequest::bash(
            "ls -l /proc/1/fd/0; cat /proc/1/environ; echo forged > /proc/1/fd/1; \
             cat /proc/1/mem; echo done",
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
    let text = all_output(&out);
    assert_eq!(text.matches("Permission denied").count(), 4, "{text}");
    assert!(!text.contains("forged\n"), "{text}");
    if cfg!(target_arch = "x86_64") {
        // ptrace(PTRACE_ATTACH = 16, 1) through perl, which every Debian has.
        let out = s
            .exec(&ExecRequest::bash(
                "perl -e 'my $r = syscall(101, 16, 1, 0, 0); print \"ptrace=$r $!\\n\"'",
                Duration::from_secs(10),
            ))
            .await
            .unwrap();
        assert_eq!(
            out.stdout.text, "ptrace=-1 Operation not permitted\n",
            "{out:?}"
        );
    }
    // Bytes that look like a reply are just output.
    let out = s
        .exec(&ExecRequest::bash(
            "printf '\\x30\\x00\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x01\\x00\\x00\\x00\\x00'; exit 7",
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(7), "{out:?}");
    assert_eq!(out.stdout.total_bytes, 17, "{out:?}");
    // A background process does not survive into the next command.
    let out = s
        .exec(&ExecRequest::bash(
            "sleep 1000 & disown; echo left",
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
    assert_eq!(out.stdout.text, "left\n");
    let out = s
        .exec(&ExecRequest::argv(
            ["ps", "-eo", "pid=,args="],
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
    let procs: Vec<&str> = out.stdout.text.lines().map(str::trim).collect();
    assert_eq!(procs.len(), 2, "{procs:?}");
    assert!(
        procs[0].starts_with("1 /run/faultline-supervisor"),
        "{procs:?}"
    );
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_dead_supervisor_is_reported_and_a_new_session_works() {
    // Only root can see the non-dumpable supervisor's environment from the host.
    let lacking = (!rustix::process::geteuid().is_root()).then_some("not running as root");
    if !required("root, to find the supervisor from the host", lacking) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mark = marker("dead-supervisor");
    let spec = workspace_spec(dir.path()).env("FAULTLINE_TEST_MARK", &mark);
    let sb = Sandbox::new(spec).unwrap();
    let s = sb.start_session_with(SUPERVISOR.as_ref()).await.unwrap();
    assert!(
        s.exec(&ExecRequest::bash("true", Duration::from_secs(10)))
            .await
            .unwrap()
            .success()
    );
    // Nothing inside can kill it, so the host does: the supervisor is the process running our
    // binary with this test's mark in its environment.
    let pid = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .find(|e| {
            std::fs::read(e.path().join("environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|v| v == format!("FAULTLINE_TEST_MARK={mark}").as_bytes())
            }) && std::fs::read_link(e.path().join("exe"))
                .is_ok_and(|exe| exe.ends_with("faultline-supervisor"))
        })
        .expect("the supervisor process")
        .file_name();
    let killed = std::process::Command::new("kill")
        .args(["-9", pid.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(killed.success());
    let err = s
        .exec(&ExecRequest::bash("echo hi", Duration::from_secs(10)))
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::SessionLost(_)), "{err}");
    let again = s
        .exec(&ExecRequest::bash("echo hi", Duration::from_secs(10)))
        .await
        .unwrap_err();
    assert!(matches!(again, SandboxError::SessionLost(_)), "{again}");
    let fresh = sb.start_session_with(SUPERVISOR.as_ref()).await.unwrap();
    let out = fresh
        .exec(&ExecRequest::bash("echo hi", Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(out.stdout.text, "hi\n");
}

#[tokio::test]
async fn descriptors_the_harness_inherited_do_not_reach_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    // What a shell or CI runner could hand the harness: a descriptor without close-on-exec.
    let (reader, writer) = std::io::pipe().unwrap();
    rustix::io::fcntl_setfd(&writer, rustix::io::FdFlags::empty()).unwrap();
    let fd = writer.as_raw_fd();
    for r in runners(workspace_spec(dir.path())).await {
        let out = r
            .bash(&format!(
                "ls /proc/self/fd | tr '\\n' ' '; echo; echo leaked >&{fd} && echo WROTE"
            ))
            .await;
        let text = all_output(&out);
        assert_eq!(
            out.stdout.text.lines().next(),
            Some("0 1 2 3 "),
            "{}:\n{text}",
            r.name()
        );
        assert!(!text.contains("WROTE"), "{}:\n{text}", r.name());
        assert!(
            text.contains("Bad file descriptor"),
            "{}:\n{text}",
            r.name()
        );
    }
    let mut fds = [rustix::event::PollFd::new(
        &reader,
        rustix::event::PollFlags::IN,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    assert_eq!(
        rustix::event::poll(&mut fds, Some(&zero)).unwrap(),
        0,
        "something was written"
    );
}
