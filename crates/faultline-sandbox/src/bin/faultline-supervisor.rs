//! The in-sandbox supervisor of a `faultline_sandbox::Session`; see
//! `faultline_sandbox::supervisor`.

fn main() -> std::process::ExitCode {
    faultline_sandbox::supervisor::main()
}
