//! Whether this replica can do a unit's work: what decides which replica
//! takes a unit's Lease when more than one could.
//!
//! A replica that is still loading a unit's module is not the one to lead
//! it while a warm standby is there: the standby reconciles at once, the
//! newcomer only once its module is loaded (controller-runtime starts its
//! sources before it campaigns, for the same reason). And a replica that
//! cannot get the module at all leaves the unit to one that can.

/// What this replica can do for a unit now, as the elector reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ability {
    /// It serves the unit (its module is loaded here), or nothing is to be
    /// served that another replica would serve better (an invalid spec, a
    /// paused Reconciler, a module every replica refuses): it takes a free
    /// Lease at once, within its share.
    #[default]
    Ready,
    /// Its module is being fetched or loaded here. It takes a free or
    /// expired Lease only once it is ready, or when nobody else took it
    /// within a lease duration, or when it is the only live replica. A
    /// Lease it already holds it keeps (a swap, a rebuild).
    Warming,
    /// It cannot serve the unit (the source unreachable or refused from
    /// here, a rollback version it lacks): as [`Ability::Warming`] for
    /// taking a Lease, and a Lease it holds is handed over after a lease
    /// duration (doubled at each consecutive hand-over) when another
    /// replica is live.
    Unable,
}

impl Ability {
    /// Whether it takes a free Lease without first leaving it to others.
    pub fn takes_at_once(self) -> bool {
        self == Ability::Ready
    }

    /// Whether a Lease it holds is to be handed to a replica that can do
    /// better.
    pub fn hands_over(self) -> bool {
        self == Ability::Unable
    }
}
