//! Prints the Greeting CRD, made from the types by kube's `CustomResource`
//! derive (`GreetingSpec` in src/lib.rs). `operon build` runs it and writes
//! `crd.yaml`; a native tool only, never part of the component.

use kube::CustomResourceExt;

fn main() {
    let crd = {{ident}}::GreetingResource::crd();
    println!("{}", serde_json::to_string(&crd).expect("a CRD serializes"));
}
