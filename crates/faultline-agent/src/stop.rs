//! Why a trial of the built-in agent ended, as types: the loop decides with these and the
//! trajectory's strings are derived from them in one place, so a new way to end cannot be left
//! without an exit status.

use crate::record::Recorder;
use faultline_model::ModelError;
use faultline_sandbox::SandboxError;
use faultline_schema::trajectory::{LimitFired, LimitKind, Spent};
use faultline_schema::{ExitStatus, Limits, Submission};

/// A budget of the trial that ran out, with its configured value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// Model calls ([`Limits::steps`]).
    Steps(u32),
    /// Dollars ([`Limits::cost_usd`]).
    Cost(f64),
    /// Input plus output tokens ([`Limits::tokens`]).
    Tokens(u64),
    /// Wall-clock seconds ([`Limits::wall_secs`]).
    WallTime(u64),
    /// Wall-clock seconds not spent waiting on model retries ([`Limits::working_secs`]).
    WorkingTime(u64),
}

impl Limit {
    /// What `trajectory.json` records it as: the field of [`Limits`] that set it.
    pub fn kind(self) -> LimitKind {
        match self {
            Limit::Steps(_) => LimitKind::Steps,
            Limit::Cost(_) => LimitKind::CostUsd,
            Limit::Tokens(_) => LimitKind::Tokens,
            Limit::WallTime(_) => LimitKind::WallSecs,
            Limit::WorkingTime(_) => LimitKind::WorkingSecs,
        }
    }

    /// The configured value, as `trajectory.json` records it.
    pub fn value(self) -> f64 {
        match self {
            Limit::Steps(n) => n.into(),
            Limit::Cost(usd) => usd,
            Limit::Tokens(n) => n as f64,
            Limit::WallTime(secs) | Limit::WorkingTime(secs) => secs as f64,
        }
    }

    /// The record of this limit ending a trial.
    pub fn fired(self) -> LimitFired {
        LimitFired {
            limit: self.kind(),
            value: self.value(),
        }
    }

    /// The first limit that stops the next model call, if any ([`Limits::first_reached`]).
    pub fn first_reached(limits: &Limits, rec: &Recorder) -> Option<Limit> {
        let totals = &rec.trajectory.totals;
        let spent = Spent {
            steps: totals.steps,
            cost_usd: totals.cost_usd,
            tokens: totals.tokens.total(),
            wall_secs: rec.elapsed(),
            working_secs: rec.working(),
        };
        let fired = limits.first_reached(&spent)?;
        Some(match fired.limit {
            LimitKind::Steps => Limit::Steps(limits.steps),
            LimitKind::CostUsd => Limit::Cost(fired.value),
            LimitKind::Tokens => Limit::Tokens(fired.value as u64),
            LimitKind::WallSecs => Limit::WallTime(limits.wall_secs),
            LimitKind::WorkingSecs => Limit::WorkingTime(fired.value as u64),
        })
    }
}

/// How a trial of the built-in agent ended. Failures of the harness itself (a trajectory that
/// cannot be written, a workspace that cannot be diffed) are not here: they are errors of the
/// run, never recorded as the trial's outcome.
#[derive(Debug)]
pub enum Stop {
    /// The agent submitted.
    Submitted(Submission),
    /// A budget ran out.
    Limit(Limit),
    /// Too many consecutive replies held no command ([`crate::builtin::MAX_FORMAT_ERRORS`]).
    FormatErrors,
    /// The model API failed for good.
    ModelError(ModelError),
    /// The sandbox could not run a command.
    SandboxError(SandboxError),
    /// The agent's commands wrote past the sandbox's disk limit, and the sandbox was killed.
    DiskLimit,
}

impl Stop {
    /// The exit status the trajectory records.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            Stop::Submitted(_) => ExitStatus::Submitted,
            Stop::Limit(limit) => limit.kind().exit_status(),
            Stop::FormatErrors => ExitStatus::FormatErrors,
            Stop::ModelError(_) => ExitStatus::ModelError,
            Stop::SandboxError(_) => ExitStatus::SandboxError,
            Stop::DiskLimit => ExitStatus::ResourceLimit,
        }
    }

    /// The limit the trajectory records as having ended the trial.
    pub fn limit_fired(&self) -> Option<LimitFired> {
        match self {
            Stop::Limit(limit) => Some(limit.fired()),
            _ => None,
        }
    }

    /// The error message the trajectory records.
    pub fn error(&self) -> Option<String> {
        match self {
            Stop::ModelError(e) => Some(format!("{e} ({})", e.kind().as_str())),
            Stop::SandboxError(e) => Some(e.to_string()),
            Stop::DiskLimit => Some("the commands wrote past the sandbox's disk limit".into()),
            _ => None,
        }
    }

    /// Why the trial ended for a reason that is not the agent's, if it did: the model's API
    /// failed for good (down, overloaded past the retry budget, misconfigured, or answering
    /// outside its protocol). A prompt that outgrew the context window is the agent's own.
    pub fn infra_failure(&self) -> Option<String> {
        match self {
            Stop::ModelError(e) if e.kind().is_infrastructure() => self.error(),
            _ => None,
        }
    }

    /// What the agent submitted: nothing unless it submitted.
    pub fn into_submission(self) -> Submission {
        match self {
            Stop::Submitted(submission) => submission,
            _ => Submission::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_error() -> ModelError {
        ModelError::Config("no key".into())
    }

    #[test]
    fn every_stop_has_its_exit_status_and_record() {
        let patch = Submission::Patch("diff".into());
        let cases = [
            (Stop::Submitted(patch.clone()), ExitStatus::Submitted),
            (Stop::Limit(Limit::Steps(2)), ExitStatus::StepLimit),
            (Stop::Limit(Limit::Cost(1.5)), ExitStatus::CostLimit),
            (Stop::Limit(Limit::Tokens(9)), ExitStatus::TokenLimit),
            (Stop::Limit(Limit::WallTime(3)), ExitStatus::WallTimeLimit),
            (
                Stop::Limit(Limit::WorkingTime(4)),
                ExitStatus::WallTimeLimit,
            ),
            (Stop::FormatErrors, ExitStatus::FormatErrors),
            (Stop::ModelError(model_error()), ExitStatus::ModelError),
            (
                Stop::SandboxError(SandboxError::Unavailable("bwrap: no".into())),
                ExitStatus::SandboxError,
            ),
            (Stop::DiskLimit, ExitStatus::ResourceLimit),
        ];
        for (stop, status) in cases {
            assert_eq!(stop.exit_status(), status, "{stop:?}");
            assert_eq!(
                stop.limit_fired().is_some(),
                matches!(stop, Stop::Limit(_)),
                "{stop:?}"
            );
            let has_error = matches!(
                stop,
                Stop::ModelError(_) | Stop::SandboxError(_) | Stop::DiskLimit
            );
            assert_eq!(stop.error().is_some(), has_error, "{stop:?}");
            let submitted = matches!(stop, Stop::Submitted(_));
            assert_eq!(stop.into_submission() == patch, submitted);
        }
    }

    #[test]
    fn only_a_model_api_failure_outside_the_agent_is_infrastructure() {
        assert!(Stop::ModelError(model_error()).infra_failure().is_some());
        let outage = ModelError::Transport {
            kind: faultline_model::ErrorKind::Connect,
            message: "refused".into(),
            retry: Default::default(),
        };
        assert!(
            Stop::ModelError(outage)
                .infra_failure()
                .unwrap()
                .contains("connect")
        );
        let too_long = ModelError::Status {
            kind: faultline_model::ErrorKind::ContextLength,
            status: 400,
            message: "prompt is too long".into(),
            body: String::new(),
            retry: Default::default(),
        };
        assert_eq!(Stop::ModelError(too_long).infra_failure(), None);
        for stop in [
            Stop::FormatErrors,
            Stop::Limit(Limit::Steps(2)),
            Stop::DiskLimit,
        ] {
            assert_eq!(stop.infra_failure(), None, "{stop:?}");
        }
    }

    #[test]
    fn errors_read_as_before() {
        assert_eq!(
            Stop::ModelError(model_error()).error().unwrap(),
            format!("{} (config)", model_error())
        );
        assert_eq!(
            Stop::SandboxError(SandboxError::SessionLost("gone".into()))
                .error()
                .unwrap(),
            "sandbox session lost: gone"
        );
    }

    #[test]
    fn limits_are_recorded_under_their_field_names() {
        let fired = |l: Limit| serde_json::to_value(l.fired()).unwrap();
        let recorded = |name: &str, value: f64| serde_json::json!({"limit": name, "value": value});
        assert_eq!(fired(Limit::Steps(450)), recorded("steps", 450.0));
        assert_eq!(fired(Limit::Cost(5.0)), recorded("cost_usd", 5.0));
        assert_eq!(fired(Limit::Tokens(200)), recorded("tokens", 200.0));
        assert_eq!(fired(Limit::WallTime(1800)), recorded("wall_secs", 1800.0));
        assert_eq!(
            fired(Limit::WorkingTime(60)),
            recorded("working_secs", 60.0)
        );
    }

    fn recorder(limits: &Limits) -> Recorder {
        crate::record::test_recorder(limits, None)
    }

    #[test]
    fn limits_are_checked_in_order() {
        let limits = Limits {
            steps: 3,
            cost_usd: Some(1.0),
            tokens: Some(100),
            working_secs: Some(0),
            ..Limits::default()
        };
        let mut rec = recorder(&limits);
        // Nothing spent yet, but no working time is allowed at all.
        assert_eq!(
            Limit::first_reached(&limits, &rec),
            Some(Limit::WorkingTime(0))
        );
        rec.trajectory.totals.tokens.input = 100;
        assert_eq!(
            Limit::first_reached(&limits, &rec),
            Some(Limit::Tokens(100))
        );
        rec.trajectory.totals.cost_usd = Some(1.0);
        assert_eq!(Limit::first_reached(&limits, &rec), Some(Limit::Cost(1.0)));
        rec.trajectory.totals.steps = 3;
        assert_eq!(Limit::first_reached(&limits, &rec), Some(Limit::Steps(3)));

        let unlimited = Limits {
            cost_usd: None,
            ..Limits::default()
        };
        let mut rec = recorder(&unlimited);
        rec.trajectory.totals.cost_usd = Some(1e9);
        rec.trajectory.totals.tokens.output = u64::MAX / 2;
        assert_eq!(Limit::first_reached(&unlimited, &rec), None);
    }
}
