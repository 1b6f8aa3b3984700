//! `Case`: one named, self-checking piece of the specification.

use accel_graph_api::{Backend, Capabilities};

/// What a case needs from the backend: `Ok(())` to run it, `Err(reason)` to skip it with the
/// reason printed (for example `"backend has no host callbacks"`).
pub type Requirement = fn(&Capabilities) -> Result<(), String>;

/// One case of the suite: a named check of one point of the specification.
///
/// `run` returns `Ok(())` when the backend behaves as specified and `Err(message)` saying what
/// differed otherwise. A case cleans up after itself: no stream left capturing, every buffer and
/// graph it made dropped, the thread's current stream restored.
pub struct Case<B: Backend> {
    /// Stable, unique name, starting with the point of the design it checks (`"5.01 ..."`).
    pub name: &'static str,
    /// The group it belongs to (`"5.05 misuse"`, `"utilities"`, ...).
    pub section: &'static str,
    /// Checks the backend's capabilities; an `Err` skips the case with that reason.
    pub requires: Requirement,
    /// Runs the case; `Err` is a failure with its message.
    pub run: fn(&B) -> Result<(), String>,
}

impl<B: Backend> Case<B> {
    /// A case with a requirement.
    pub fn new(
        name: &'static str,
        section: &'static str,
        requires: Requirement,
        run: fn(&B) -> Result<(), String>,
    ) -> Self {
        Case {
            name,
            section,
            requires,
            run,
        }
    }

    /// Why the case must be skipped on a backend with `caps`, if it must.
    pub fn skip_reason(&self, caps: &Capabilities) -> Option<String> {
        (self.requires)(caps).err()
    }
}

impl<B: Backend> Clone for Case<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Case<B> {}

impl<B: Backend> std::fmt::Debug for Case<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("section", &self.section)
            .finish()
    }
}

/// The requirements cases use, each naming the missing capability in its skip reason.
pub mod requirements {
    use accel_graph_api::Capabilities;

    /// Every backend can run the case.
    pub fn none(_: &Capabilities) -> Result<(), String> {
        Ok(())
    }

    /// Needs `capabilities().multi_stream_capture` (fork/join through events).
    pub fn multi_stream_capture(caps: &Capabilities) -> Result<(), String> {
        caps.multi_stream_capture.then_some(()).ok_or_else(|| {
            "backend has no multi-stream capture (capabilities().multi_stream_capture is false)"
                .to_owned()
        })
    }

    /// Needs `capabilities().host_callbacks`.
    pub fn host_callbacks(caps: &Capabilities) -> Result<(), String> {
        caps.host_callbacks
            .then_some(())
            .ok_or_else(|| "backend has no host callbacks".to_owned())
    }

    /// Needs a default stream that refuses capture.
    pub fn uncapturable_default_stream(caps: &Capabilities) -> Result<(), String> {
        caps.uncapturable_default_stream
            .then_some(())
            .ok_or_else(|| {
                "backend's default stream can be captured \
             (capabilities().uncapturable_default_stream is false)"
                    .to_owned()
            })
    }

    /// Needs capture error modes to be enforced.
    pub fn capture_modes_enforced(caps: &Capabilities) -> Result<(), String> {
        caps.capture_modes_enforced.then_some(()).ok_or_else(|| {
            "backend does not enforce capture error modes \
             (capabilities().capture_modes_enforced is false)"
                .to_owned()
        })
    }
}
