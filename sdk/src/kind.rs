//! Kubernetes kinds: [`Gvk`] values and the [`ObjectKind`] trait that ties a
//! Rust type to its `apiVersion` and `kind`.

use std::fmt;

pub use crate::raw::Gvk;

/// A Rust type that stands for one Kubernetes kind.
///
/// The SDK uses it to find the kind of a typed read ([`Context::get`],
/// [`Request::children`]), and to fill `apiVersion` and `kind` into desired
/// objects that do not serialize them ([`Outcome::apply_kind`]).
///
/// With the `k8s-openapi` feature every `k8s_openapi::Resource` (Deployment,
/// Service, ConfigMap, ...) implements it. For your own custom resource, write
/// the two constants:
///
/// ```
/// use operon_sdk::ObjectKind;
///
/// #[derive(serde::Deserialize)]
/// struct WebApp { /* spec, status */ }
///
/// impl ObjectKind for WebApp {
///     const API_VERSION: &'static str = "example.operon.dev/v1alpha1";
///     const KIND: &'static str = "WebApp";
/// }
///
/// assert_eq!(WebApp::gvk().group, "example.operon.dev");
/// ```
///
/// [`Context::get`]: crate::Context::get
/// [`Request::children`]: crate::Request::children
/// [`Outcome::apply_kind`]: crate::Outcome::apply_kind
pub trait ObjectKind {
    /// `group/version`, or just `version` for the core group (`v1`).
    const API_VERSION: &'static str;
    /// The kind, in UpperCamelCase (`Deployment`).
    const KIND: &'static str;

    /// The kind as a [`Gvk`].
    fn gvk() -> Gvk {
        Gvk::from_api_version(Self::API_VERSION, Self::KIND)
    }
}

#[cfg(feature = "k8s-openapi")]
impl<K: k8s_openapi::Resource> ObjectKind for K {
    const API_VERSION: &'static str = K::API_VERSION;
    const KIND: &'static str = K::KIND;
}

impl Gvk {
    /// A kind from its group (empty for the core group), version and kind.
    ///
    /// ```
    /// let deployment = operon_sdk::Gvk::new("apps", "v1", "Deployment");
    /// assert_eq!(deployment.api_version(), "apps/v1");
    /// ```
    pub fn new(group: impl Into<String>, version: impl Into<String>, kind: impl Into<String>) -> Gvk {
        Gvk { group: group.into(), version: version.into(), kind: kind.into() }
    }

    /// A kind from an object's `apiVersion` (`apps/v1`, or `v1` for the core
    /// group) and `kind`.
    ///
    /// ```
    /// let service = operon_sdk::Gvk::from_api_version("v1", "Service");
    /// assert_eq!(service, operon_sdk::Gvk::new("", "v1", "Service"));
    /// ```
    pub fn from_api_version(api_version: &str, kind: &str) -> Gvk {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Gvk::new(group, version, kind)
    }

    /// The kind of the Rust type `K`.
    pub fn of<K: ObjectKind + ?Sized>() -> Gvk {
        K::gvk()
    }

    /// The `apiVersion` of objects of this kind: `group/version`, or just
    /// `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// Whether an object with this `apiVersion` and `kind` is of this kind.
    pub fn matches(&self, api_version: &str, kind: &str) -> bool {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.kind == kind && self.group == group && self.version == version
    }
}

/// `apps/v1 Deployment`, `v1 Service`.
impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{} {}", self.version, self.kind)
        } else {
            write!(f, "{}/{} {}", self.group, self.version, self.kind)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_should_round_trip_for_core_and_named_groups() {
        for (api_version, group) in
            [("v1", ""), ("apps/v1", "apps"), ("example.operon.dev/v1alpha1", "example.operon.dev")]
        {
            let gvk = Gvk::from_api_version(api_version, "X");
            assert_eq!(gvk.group, group);
            assert_eq!(gvk.api_version(), api_version);
            assert!(gvk.matches(api_version, "X"));
            assert!(!gvk.matches(api_version, "Y"));
        }
    }

    #[cfg(feature = "k8s-openapi")]
    #[test]
    fn k8s_openapi_resources_should_know_their_kind() {
        use k8s_openapi::api::apps::v1::Deployment;
        assert_eq!(Deployment::gvk(), Gvk::new("apps", "v1", "Deployment"));
        assert_eq!(Gvk::of::<k8s_openapi::api::core::v1::Service>().to_string(), "v1 Service");
    }
}
