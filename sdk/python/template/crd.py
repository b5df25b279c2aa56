"""Prints the Greeting CRD, its `spec` and `status` stated by the dataclasses
the reconciler reads them as (app.py): `operon build` runs this and writes
crd.yaml, so the types and the CRD cannot drift. Change the dataclasses, not
crd.yaml."""

import json

from operon_sdk import crd

from app import GreetingSpec, GreetingStatus

print(
    json.dumps(
        crd(
            group="demo.operon.dev",
            version="v1alpha1",
            kind="Greeting",
            plural="greetings",
            spec=GreetingSpec,
            status=GreetingStatus,
        )
    )
)
