//! The bounded label values the host's metrics take.

/// How one reconcile ended, as controller-runtime labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Done; nothing scheduled.
    Success,
    /// A transient error: retried with backoff.
    Error,
    /// A terminal error: not retried. Counted as `error` in
    /// `controller_runtime_reconcile_total` and also in
    /// `controller_runtime_terminal_reconcile_errors_total`, as
    /// controller-runtime does.
    TerminalError,
    /// Asked to run again at once (through the rate limiter).
    Requeue,
    /// Asked to run again after a delay.
    RequeueAfter,
}

impl ReconcileResult {
    /// The `result` label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error | Self::TerminalError => "error",
            Self::Requeue => "requeue",
            Self::RequeueAfter => "requeue_after",
        }
    }
}

/// Why a guest call failed: the `kind` label of `operon_guest_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestErrorKind {
    /// The wall-clock deadline passed (epoch interruption).
    Timeout,
    /// The instance hit its memory cap.
    Memory,
    /// Any other trap (unreachable, out-of-bounds, a guest panic).
    Trap,
    /// The result was not what the contract allows (invalid JSON, …).
    Malformed,
    /// The result was larger than the host accepts.
    Oversized,
    /// A fresh instance could not be created.
    Instantiate,
}

impl GuestErrorKind {
    /// Every kind, for zero-initialising series.
    pub const ALL: [Self; 6] =
        [Self::Timeout, Self::Memory, Self::Trap, Self::Malformed, Self::Oversized, Self::Instantiate];

    /// The `kind` label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Memory => "memory",
            Self::Trap => "trap",
            Self::Malformed => "malformed",
            Self::Oversized => "oversized",
            Self::Instantiate => "instantiate",
        }
    }
}

impl From<&crate::runtime::CallError> for GuestErrorKind {
    fn from(e: &crate::runtime::CallError) -> GuestErrorKind {
        use crate::runtime::CallError;
        match e {
            CallError::Timeout { .. } => GuestErrorKind::Timeout,
            CallError::MemoryExceeded { .. } => GuestErrorKind::Memory,
            CallError::Trap { .. } => GuestErrorKind::Trap,
            CallError::Malformed(_) => GuestErrorKind::Malformed,
            CallError::OutputTooLarge { .. } => GuestErrorKind::Oversized,
            CallError::Instantiate(_) | CallError::Reload(_) => GuestErrorKind::Instantiate,
        }
    }
}

/// What the applier did: the `operation` label of `operon_apply_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyOperation {
    /// A server-side apply of a desired child.
    Apply,
    /// A delete of a child that is no longer desired.
    Delete,
    /// A write of the status subresource.
    Status,
}

impl ApplyOperation {
    /// Every operation, for zero-initialising series.
    pub const ALL: [Self; 3] = [Self::Apply, Self::Delete, Self::Status];

    /// The `operation` label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Apply => "apply",
            Self::Delete => "delete",
            Self::Status => "status",
        }
    }
}
