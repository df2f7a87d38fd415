//! A supervisor from another build refuses the launcher's command line; the error must say so
//! instead of telling the user to install bubblewrap. Its own test binary: the supervisor
//! override is process-wide.

use faultline_sandbox::{SandboxError, check_available, use_supervisor};
use std::os::unix::fs::PermissionsExt;

#[tokio::test]
async fn a_supervisor_from_another_build_is_named_as_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("faultline-supervisor");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'faultline-supervisor launch: unknown option --from-the-future' >&2\nexit 125\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    use_supervisor(fake);
    let err = check_available().await.unwrap_err();
    assert!(matches!(err, SandboxError::LauncherFailed(_)), "{err}");
    let text = err.to_string();
    assert!(text.contains("same build"), "{text}");
    assert!(!text.contains("apt-get install"), "{text}");
}
