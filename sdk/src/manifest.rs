//! [`Manifest`]: what a reconciler reconciles, owns, watches and reads.

use crate::Gvk;
use crate::raw;

pub use crate::raw::{Mapping, UpdateStrategy};

/// Describes a reconciler to the host: its name, the kind it reconciles, the
/// kinds it owns, watches and reads, and its finalizer.
///
/// Returned by [`Reconciler::manifest`]; the host reads it once when it loads
/// the module and refuses outcomes that return kinds not listed in
/// [`owns`](Manifest::owns), and reads of kinds not listed anywhere.
///
/// ```
/// use operon_sdk::{Gvk, Manifest, Mapping};
///
/// let manifest = Manifest::new("webapp", Gvk::new("example.operon.dev", "v1alpha1", "WebApp"))
///     .owns(Gvk::new("apps", "v1", "Deployment"))
///     .owns(Gvk::new("", "v1", "Service"))
///     .watches(Gvk::new("", "v1", "Secret"), Mapping::Label("example.operon.dev/webapp".into()))
///     .reads(Gvk::new("", "v1", "ConfigMap"))
///     .finalizer("example.operon.dev/cleanup");
/// assert_eq!(manifest.name(), "webapp");
/// ```
///
/// [`Reconciler::manifest`]: crate::Reconciler::manifest
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    raw: raw::Manifest,
}

impl Manifest {
    /// A reconciler called `name` (lowercase `[a-z0-9-]`; it names the
    /// field manager `operon/<name>`, metrics and events) for the parent kind
    /// `for_kind`.
    pub fn new(name: impl Into<String>, for_kind: Gvk) -> Manifest {
        Manifest {
            raw: raw::Manifest {
                name: name.into(),
                for_: for_kind,
                owns: Vec::new(),
                watches: Vec::new(),
                reads: Vec::new(),
                updates: Vec::new(),
                finalizer: None,
            },
        }
    }

    /// Declares a kind of children. The host hands existing children of this
    /// kind in, in the order of the `owns` calls, and prunes the ones an
    /// outcome no longer returns.
    pub fn owns(mut self, kind: Gvk) -> Manifest {
        self.raw.owns.push(kind);
        self
    }

    /// Declares a kind whose changes reconcile the parent that `mapping`
    /// points at; the mapped objects arrive in [`Request::related`].
    ///
    /// Contract 0.2 maps from the parent too: [`Mapping::Reference`] (the
    /// parent's field at a dotted path names the object, as
    /// `spec.configRef.name`) and [`Mapping::Selector`] (the parent's field
    /// is a label selector over the watched kind, as a Service's
    /// `spec.selector`). The host keeps the index, so an event reconciles
    /// exactly the parents that name or select the object.
    ///
    /// ```
    /// use operon_sdk::{Gvk, Manifest, Mapping};
    ///
    /// let manifest = Manifest::new("app", Gvk::new("example.com", "v1", "App"))
    ///     .watches(Gvk::new("", "v1", "ConfigMap"), Mapping::Reference("spec.configRef.name".into()))
    ///     .watches(Gvk::new("", "v1", "Pod"), Mapping::Selector("spec.selector".into()));
    /// assert_eq!(manifest.as_raw().watches.len(), 2);
    /// ```
    ///
    /// [`Request::related`]: crate::Request::related
    pub fn watches(mut self, kind: Gvk, mapping: Mapping) -> Manifest {
        self.raw.watches.push(raw::Watch { kind, mapping });
        self
    }

    /// Declares a kind the reconciler reads with [`Context::get`] and
    /// [`Context::list`].
    ///
    /// [`Context::get`]: crate::Context::get
    /// [`Context::list`]: crate::Context::list
    pub fn reads(mut self, kind: Gvk) -> Manifest {
        self.raw.reads.push(kind);
        self
    }

    /// How the host changes existing children of `kind` (an owned kind):
    /// [`UpdateStrategy::InPlace`] (the default: server-side apply),
    /// [`UpdateStrategy::Recreate`] (delete and create anew when the API
    /// server refuses a change of an immutable field, as a Pod's spec), or
    /// [`UpdateStrategy::OnDelete`] (never change an existing child).
    pub fn updates(mut self, kind: Gvk, strategy: UpdateStrategy) -> Manifest {
        self.raw.updates.push(raw::OwnedUpdate { kind, strategy });
        self
    }

    /// Sets the finalizer the host keeps on the parents whose outcome
    /// [needs it](crate::Outcome::needs_finalizer) — by default every
    /// parent. While a parent that is deleted or left the Reconciler's
    /// selector carries it, it is reconciled with [`Request::finalizing`]
    /// until the outcome is [`Outcome::finalized`].
    ///
    /// [`Request::finalizing`]: crate::Request::finalizing
    /// [`Outcome::finalized`]: crate::Outcome::finalized
    pub fn finalizer(mut self, name: impl Into<String>) -> Manifest {
        self.raw.finalizer = Some(name.into());
        self
    }

    /// The finalizer, if the reconciler has one.
    pub fn finalizer_name(&self) -> Option<&str> {
        self.raw.finalizer.as_deref()
    }

    /// The reconciler's name.
    pub fn name(&self) -> &str {
        &self.raw.name
    }

    /// The parent kind.
    pub fn for_kind(&self) -> &Gvk {
        &self.raw.for_
    }

    /// The owned kinds, in declaration order.
    pub fn owned(&self) -> &[Gvk] {
        &self.raw.owns
    }

    /// The WIT record handed to the host.
    pub fn as_raw(&self) -> &raw::Manifest {
        &self.raw
    }

    /// Converts into the WIT record handed to the host.
    pub fn into_raw(self) -> raw::Manifest {
        self.raw
    }
}
