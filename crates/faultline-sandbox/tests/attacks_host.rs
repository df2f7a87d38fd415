//! Attacks on the host through what a sandbox may write: the identity its files get, the mode
//! bits it may set, the files it shares with a template, the harness's environment, the
//! terminal, and memory and disk. Each runs through a one-shot exec and through a session.
//!
//! Set `FAULTLINE_REQUIRE_PROTECTIONS=1` (as CI does) to fail instead of skipping the attacks
//! whose protection the host cannot provide. `FAULTLINE_TEST_CANARY`, when set (CI sets it),
//! names a value that must not be readable inside any sandbox.

mod common;

use common::{all_output, runners, workspace_spec};
use faultline_sandbox::{ExecRequest, ResourceLimits, Sandbox};
use faultline_testkit::protected;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

/// Every file under `dir` whose mode has the set-user-ID or set-group-ID bit.
fn special_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = e.path().symlink_metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            }
            if meta.permissions().mode() & 0o6000 != 0 {
                found.push(format!(
                    "{} {:o}",
                    e.path().display(),
                    meta.permissions().mode()
                ));
            }
        }
    }
    found
}

#[tokio::test]
async fn files_the_sandbox_writes_belong_to_an_unprivileged_uid() {
    let dir = tempfile::tempdir().unwrap();
    let sb = Sandbox::new(workspace_spec(dir.path())).unwrap();
    if !protected(&sb.protections().dedicated_identity, "dedicated identity") {
        return;
    }
    for r in runners(workspace_spec(dir.path())).await {
        let out = r.bash("id -u; echo x > /workspace/mine").await;
        assert_eq!(out.stdout.text, "1000\n", "{}: {out:?}", r.name());
        let owner = std::fs::metadata(dir.path().join("mine")).unwrap().uid();
        assert_ne!(owner, 0, "{}", r.name());
        assert_ne!(owner, rustix::process::geteuid().as_raw(), "{}", r.name());
    }
}

#[tokio::test]
async fn no_file_gets_a_set_user_id_or_set_group_id_bit() {
    let dir = tempfile::tempdir().unwrap();
    let sb = Sandbox::new(workspace_spec(dir.path())).unwrap();
    if !protected(&sb.protections().syscall_filter, "system-call filter") {
        return;
    }
    for r in runners(workspace_spec(dir.path())).await {
        let script = "cd /workspace && cp /bin/true t && \
             chmod 4755 t; chmod u+s t; chmod g+s t; chmod 2755 t; \
             install -m 4755 /bin/true i; \
             perl -e 'chmod 04755, \"t\"; sysopen(my $f, \"p\", 65|64, 04755)'; \
             python3 -c 'import os; os.close(os.open(\"o\", os.O_CREAT|os.O_WRONLY, 0o4755)); os.chmod(\"t\", 0o6755)'; \
             mkfifo -m 4755 f; ls -l";
        let out = r.bash(script).await;
        let text = all_output(&out);
        assert!(
            text.contains("Operation not permitted"),
            "{}:\n{text}",
            r.name()
        );
        assert_eq!(
            special_files(dir.path()),
            Vec::<String>::new(),
            "{}:\n{text}",
            r.name()
        );
    }
}

#[tokio::test]
async fn a_file_shared_with_a_template_cannot_be_changed() {
    let template = tempfile::tempdir().unwrap();
    let shared = template.path().join("libshared.rlib");
    std::fs::write(&shared, "TEMPLATE-BYTES").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o444)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("deps")).unwrap();
    std::fs::hard_link(&shared, dir.path().join("deps/libshared.rlib")).unwrap();
    let sb = Sandbox::new(workspace_spec(dir.path())).unwrap();
    if !protected(&sb.protections().dedicated_identity, "dedicated identity") {
        return;
    }
    for r in runners(workspace_spec(dir.path())).await {
        let out = r
            .bash(
                "f=/workspace/deps/libshared.rlib; chmod u+w $f; chmod 666 $f; \
                 echo POISON > $f; echo POISON >> $f; truncate -s 0 $f; \
                 touch -d 2001-01-01 $f; python3 -c \"open('$f','r+b').write(b'POISON')\"; \
                 cat $f",
            )
            .await;
        let text = all_output(&out);
        assert!(text.contains("TEMPLATE-BYTES"), "{}:\n{text}", r.name());
        assert!(
            text.contains("Operation not permitted") && text.contains("Permission denied"),
            "{}:\n{text}",
            r.name()
        );
    }
    assert_eq!(std::fs::read_to_string(&shared).unwrap(), "TEMPLATE-BYTES");
    let meta = std::fs::metadata(&shared).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o444);
    assert_eq!(meta.uid(), rustix::process::geteuid().as_raw());
}

#[tokio::test]
async fn the_harness_environment_is_not_readable_inside() {
    let dir = tempfile::tempdir().unwrap();
    // Values only the harness's environment has: cargo sets the first for every test binary.
    let mut canaries = vec![env!("CARGO_MANIFEST_DIR").to_string()];
    canaries.extend(std::env::var("FAULTLINE_TEST_CANARY"));
    for r in runners(workspace_spec(dir.path())).await {
        let out = r
            .bash(
                "for f in /proc/[0-9]*/environ; do echo \"== $f\"; tr '\\0' '\\n' < $f; done; \
                 env",
            )
            .await;
        let text = all_output(&out);
        assert!(text.contains("/proc/1/environ"), "{}:\n{text}", r.name());
        for c in &canaries {
            assert!(
                !text.contains(c.as_str()),
                "{}: {c} leaked:\n{text}",
                r.name()
            );
        }
    }
}

#[tokio::test]
async fn typing_into_the_callers_terminal_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sb = Sandbox::new(workspace_spec(dir.path())).unwrap();
    if !protected(&sb.protections().syscall_filter, "system-call filter") {
        return;
    }
    for r in runners(workspace_spec(dir.path())).await {
        // Without the filter the ioctl fails with ENOTTY on a non-terminal; the filter answers
        // first, whatever the descriptor.
        let out = r
            .bash(
                "python3 -c 'import fcntl, termios; fcntl.ioctl(0, termios.TIOCSTI, b\"x\")' 2>&1; \
                 python3 -c 'import fcntl; fcntl.ioctl(0, 0x541C, b\"\\x06\")' 2>&1",
            )
            .await;
        let text = all_output(&out);
        assert_eq!(
            text.matches("Operation not permitted").count(),
            2,
            "{}:\n{text}",
            r.name()
        );
    }
}

#[tokio::test]
async fn the_oom_score_cannot_be_lowered_and_no_user_namespace_made() {
    let dir = tempfile::tempdir().unwrap();
    let sb = Sandbox::new(workspace_spec(dir.path())).unwrap();
    let p = sb.protections();
    if !protected(&p.oom_first, "OOM preference")
        || !protected(&p.no_nested_userns, "no nested user namespaces")
    {
        return;
    }
    for r in runners(workspace_spec(dir.path())).await {
        let out = r
            .bash(
                "echo 0 > /proc/self/oom_score_adj; echo -1000 > /proc/self/oom_score_adj; \
                 cat /proc/self/oom_score_adj; \
                 unshare -U true && echo UNSHARED; \
                 python3 -c 'import os; os.unshare(os.CLONE_NEWUSER); print(\"UNSHARED\")'",
            )
            .await;
        let text = all_output(&out);
        assert!(
            out.stdout.text.starts_with("1000\n"),
            "{}:\n{text}",
            r.name()
        );
        assert!(!text.contains("UNSHARED"), "{}:\n{text}", r.name());
    }
}

#[tokio::test]
async fn a_memory_bomb_ends_as_a_recorded_limit() {
    let dir = tempfile::tempdir().unwrap();
    let limits = ResourceLimits {
        memory_bytes: Some(256 << 20),
        ..ResourceLimits::default()
    };
    let spec = workspace_spec(dir.path()).limits(limits);
    let sb = Sandbox::new(spec.clone()).unwrap();
    if !protected(&sb.protections().memory_limit, "memory limit") {
        return;
    }
    for r in runners(spec).await {
        let out = r
            .run(&ExecRequest::bash(
                "python3 -c 'b = bytearray(1 << 30); b[::4096] = b\"x\" * len(b[::4096]); print(\"SURVIVED\")'",
                Duration::from_secs(60),
            ))
            .await;
        assert!(
            !out.stdout.text.contains("SURVIVED"),
            "{}: {out:?}",
            r.name()
        );
        assert!(out.memory_limit_hit, "{}: {out:?}", r.name());
        let after = r.bash("echo alive").await;
        assert_eq!(after.stdout.text, "alive\n", "{}", r.name());
    }
}

#[tokio::test]
async fn a_disk_bomb_ends_as_a_recorded_limit() {
    const LIMIT: u64 = 64 << 20;
    let dir = tempfile::tempdir().unwrap();
    let limits = ResourceLimits {
        disk_bytes: Some(LIMIT),
        ..ResourceLimits::default()
    };
    let spec = workspace_spec(dir.path()).limits(limits);
    let sb = Sandbox::new(spec.clone()).unwrap();
    if !protected(&sb.protections().disk_limit, "disk limit") {
        return;
    }
    let runners = runners(spec).await;
    // One big file stops at the limit (the kernel refuses to grow it); many smaller ones are
    // measured and the sandbox is killed.
    let out = runners[0]
        .bash("head -c 200M /dev/zero > /workspace/one; ls -l /workspace/one")
        .await;
    assert!(
        all_output(&out).contains("File size limit exceeded"),
        "{out:?}"
    );
    let size = std::fs::metadata(dir.path().join("one")).unwrap().len();
    assert!(size <= LIMIT, "{size}");
    std::fs::remove_file(dir.path().join("one")).unwrap();
    for r in &runners {
        let out = r
            .run(&ExecRequest::bash(
                "for i in $(seq 1 400); do head -c 4M /dev/zero > /workspace/f$i; done; echo WROTE-ALL",
                Duration::from_secs(120),
            ))
            .await;
        assert!(out.disk_limit_hit, "{}: {out:?}", r.name());
        assert!(
            !out.stdout.text.contains("WROTE-ALL"),
            "{}: {out:?}",
            r.name()
        );
        let used: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.metadata().unwrap().len())
            .sum();
        // What a second of writing adds past the limit, at most.
        assert!(used < 1 << 30, "{}: {used} bytes landed", r.name());
        for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
}

/// A sandbox with a loopback relay reaches the one host socket it was given, through the port it
/// was given, and nothing else of the host: not a TCP service on the host's loopback (a model
/// gateway listening there, say), nor another socket.
#[tokio::test]
async fn a_relay_reaches_its_one_host_socket_and_nothing_else() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    let socket = dir.path().join("service.sock");
    let service = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::thread::spawn(move || {
        for mut stream in service.incoming().flatten() {
            let mut line = String::new();
            std::io::BufReader::new(&stream)
                .read_line(&mut line)
                .unwrap();
            stream.write_all(format!("pong {line}").as_bytes()).unwrap();
        }
    });
    let host_tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host_tcp.local_addr().unwrap().port();
    let spec = workspace_spec(&workspace).relay(faultline_sandbox::LoopbackRelay {
        port: 4000,
        socket: socket.clone(),
    });
    let sb = Sandbox::new(spec).unwrap();
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/4000 && echo ping >&3 && head -1 <&3; \
         (exec 4<>/dev/tcp/127.0.0.1/{host_port}) 2>/dev/null && echo HOST-TCP-REACHED; \
         ls /run; echo done"
    );
    let out = sb
        .exec(&ExecRequest::bash(script, Duration::from_secs(20)))
        .await
        .unwrap();
    let text = all_output(&out);
    assert!(text.contains("pong ping"), "{text}");
    assert!(!text.contains("HOST-TCP-REACHED"), "{text}");
    assert!(text.contains("done"), "{text}");
    assert!(!text.contains("service.sock"), "{text}");
}
