//! A plugin registered for admission, and its route as the handler sees it.

use super::*;

/// One plugin whose module validates and defaults its parent kind.
#[derive(Clone)]
pub struct Registration {
    /// Names the routes (`/validate/<name>`), the configurations
    /// (`operon-<name>`) and the webhooks (`validate.<name>.operon.dev`).
    /// Lowercase letters, digits, `-` and `.`.
    pub name: String,
    /// The controller whose module answers. Read at every call.
    pub controller: ModuleController,
    /// The replica leading this unit writes the configurations.
    pub leadership: Leadership,
    /// What happens when the guest cannot answer.
    pub failure_policy: FailurePolicy,
    /// The API server's webhook timeout (1–30 s). The guest's deadline is
    /// the smaller of the module's timeout and half of this.
    pub timeout: Duration,
    /// Only objects in namespaces matching this selector.
    pub namespace_selector: Option<LabelSelector>,
    /// Only objects matching this selector.
    pub object_selector: Option<LabelSelector>,
    /// For a plugin that acts in one namespace only (a namespaced
    /// Reconciler): only objects in that namespace are sent.
    pub scope_namespace: Option<String>,
}

impl Registration {
    /// A registration with the defaults: `Fail`, a 10 s timeout, no
    /// selectors, every namespace.
    pub fn new(name: impl Into<String>, controller: ModuleController, leadership: Leadership) -> Registration {
        Registration {
            name: name.into(),
            controller,
            leadership,
            failure_policy: FailurePolicy::Fail,
            timeout: Duration::from_secs(10),
            namespace_selector: None,
            object_selector: None,
            scope_namespace: None,
        }
    }

    /// The deadline of one guest call: well under the API server's
    /// timeout, so that the host answers (per the failure policy) before the
    /// API server gives up.
    pub(super) fn guest_deadline(&self) -> Duration {
        self.timeout / 2
    }

    pub(super) fn settings(&self) -> config::Settings<'_> {
        config::Settings {
            name: &self.name,
            failure_policy: self.failure_policy,
            timeout: self.timeout,
            namespace_selector: self.namespace_selector.as_ref(),
            object_selector: self.object_selector.as_ref(),
            scope_namespace: self.scope_namespace.as_deref(),
        }
    }

    pub(super) fn check(&self) -> Result<(), Error> {
        let invalid = |reason: String| Error::InvalidPlugin { plugin: self.name.clone(), reason };
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 200
            && self.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && self.name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && self.name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !name_ok {
            return Err(invalid(format!(
                "name {:?} must be 1-200 characters of [a-z0-9.-], starting and ending with a letter or digit",
                self.name
            )));
        }
        if !(1..=30).contains(&self.timeout.as_secs()) || self.timeout.subsec_nanos() != 0 {
            return Err(invalid(format!("timeout {:?} must be whole seconds between 1 and 30", self.timeout)));
        }
        Ok(())
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .field("controller", &self.controller.name())
            .field("failure_policy", &self.failure_policy)
            .field("timeout", &self.timeout)
            .field("scope_namespace", &self.scope_namespace)
            .finish_non_exhaustive()
    }
}

/// A registered plugin, as the handler sees it.
pub(crate) struct Route {
    pub(super) registration: Registration,
    /// The kind served, its plural and scope (discovery, at registration).
    pub(super) kind: Gvk,
    pub(super) plural: String,
    pub(super) namespaced: bool,
    /// The plugin's admission calls in flight
    /// (`--webhook-max-concurrent-per-plugin`), kept across re-registrations.
    pub(super) slots: Arc<tokio::sync::Semaphore>,
    /// When its refusals were last logged.
    pub(super) warned: Arc<super::handler::Warned>,
    /// Changes at every (re-)registration, so a delayed removal after
    /// `unregister` leaves a newer registration alone.
    pub(super) generation: u64,
    /// Whether its configurations should exist: `false` once unregistered
    /// (the route only answers calls still in flight).
    pub(super) configured: bool,
}
