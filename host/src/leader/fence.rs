//! The write fence: whether this replica may write on behalf of a
//! controller right now.
//!
//! Stepping down is a notification (see [`LeaderElector`](super::LeaderElector)'s
//! caveats); the fence turns it into a rule the writer cannot forget. The
//! applier checks it immediately before every API write, so once leadership
//! is lost — even while a worker is mid-reconcile, or a task that should
//! have been stopped is still running — no further write leaves this
//! replica. A request already on the wire cannot be recalled; the elector
//! steps down `lease_duration - renew_deadline` before anyone else may take
//! over, which covers it.

use tokio::sync::watch;

/// Why a write was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not leading {0}: this replica may not write for it (another replica has or may take its lease)")]
pub struct NotLeading(pub String);

/// A view of "leading" that writers check. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Fence {
    leading: watch::Receiver<bool>,
    lease: String,
}

impl Fence {
    /// A fence that follows an elector's channel
    /// ([`LeaderElector::subscribe`](super::LeaderElector::subscribe)).
    pub fn new(leading: watch::Receiver<bool>, lease: impl Into<String>) -> Fence {
        Fence { leading, lease: lease.into() }
    }

    /// A fence that is always open: the only replica, no election.
    pub fn open() -> Fence {
        // A receiver keeps the last value after its sender is gone.
        let (_tx, rx) = watch::channel(true);
        Fence { leading: rx, lease: "(no election)".into() }
    }

    /// Whether writes are allowed now.
    pub fn is_open(&self) -> bool {
        *self.leading.borrow()
    }

    /// `Ok` while writes are allowed.
    ///
    /// # Errors
    /// [`NotLeading`] once leadership is lost.
    pub fn check(&self) -> Result<(), NotLeading> {
        if self.is_open() { Ok(()) } else { Err(NotLeading(self.lease.clone())) }
    }

    /// Resolves when the fence closes (or its elector is gone).
    pub async fn closed(&self) {
        let mut rx = self.leading.clone();
        let _ = rx.wait_for(|leading| !*leading).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fence_should_close_when_leadership_is_lost() {
        let (tx, rx) = watch::channel(true);
        let fence = Fence::new(rx, "ns/lease");
        assert!(fence.check().is_ok());
        tx.send_replace(false);
        let err = fence.check().unwrap_err();
        assert!(err.to_string().contains("ns/lease"), "{err}");
        fence.closed().await;
    }

    #[test]
    fn an_open_fence_should_stay_open_without_its_sender() {
        assert!(Fence::open().check().is_ok());
    }
}
