//! The children a [`WebApp`](crate::WebApp) wants: Deployment, Service and,
//! when `spec.ingress` is set, Ingress. All named after the WebApp.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule, IngressServiceBackend, IngressSpec,
    ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::WebAppSpec;

/// Name of the container and of its port.
const CONTAINER: &str = "web";
const PORT_NAME: &str = "http";

/// The labels of every child and of the pods: `app.kubernetes.io/name` and
/// `app.kubernetes.io/managed-by`.
pub fn labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), name.to_owned()),
        ("app.kubernetes.io/managed-by".to_owned(), "operon".to_owned()),
    ])
}

/// The pod selector of the Deployment and the Service. Only the name label:
/// a Deployment's selector is immutable, so it must never need to change.
fn selector(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/name".to_owned(), name.to_owned())])
}

fn metadata(name: &str) -> ObjectMeta {
    ObjectMeta { name: Some(name.to_owned()), labels: Some(labels(name)), ..ObjectMeta::default() }
}

/// The Deployment: `spec.replicas` pods of one container running
/// `spec.image`, listening on `spec.port` (named `http`), with `spec.env`.
pub fn deployment(name: &str, spec: &WebAppSpec) -> Deployment {
    let env: Vec<EnvVar> = spec
        .env
        .iter()
        .map(|var| EnvVar { name: var.name.clone(), value: Some(var.value.clone()), ..EnvVar::default() })
        .collect();
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(spec.image.clone()),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.to_owned()),
            container_port: spec.port,
            ..ContainerPort::default()
        }]),
        env: (!env.is_empty()).then_some(env),
        ..Container::default()
    };
    Deployment {
        metadata: metadata(name),
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas),
            selector: LabelSelector { match_labels: Some(selector(name)), ..LabelSelector::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels(name)), ..ObjectMeta::default() }),
                spec: Some(PodSpec { containers: vec![container], ..PodSpec::default() }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// The Service: ClusterIP, `spec.port` to the pods' `http` port.
pub fn service(name: &str, spec: &WebAppSpec) -> Service {
    Service {
        metadata: metadata(name),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(selector(name)),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.to_owned()),
                port: spec.port,
                target_port: Some(IntOrString::String(PORT_NAME.to_owned())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The Ingress, when `spec.ingress` is set: `host` and `path` (prefix, `/`
/// by default) to the Service's `http` port.
pub fn ingress(name: &str, spec: &WebAppSpec) -> Option<Ingress> {
    let wanted = spec.ingress.as_ref()?;
    let path = HTTPIngressPath {
        path: Some(wanted.path.clone().unwrap_or_else(|| "/".to_owned())),
        path_type: "Prefix".to_owned(),
        backend: IngressBackend {
            service: Some(IngressServiceBackend {
                name: name.to_owned(),
                port: Some(ServiceBackendPort { name: Some(PORT_NAME.to_owned()), number: None }),
            }),
            resource: None,
        },
    };
    Some(Ingress {
        metadata: metadata(name),
        spec: Some(IngressSpec {
            ingress_class_name: wanted.class_name.clone(),
            rules: Some(vec![IngressRule {
                host: Some(wanted.host.clone()),
                http: Some(HTTPIngressRuleValue { paths: vec![path] }),
            }]),
            ..IngressSpec::default()
        }),
        status: None,
    })
}
