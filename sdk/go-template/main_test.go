package main

import (
	"testing"

	operon "operon.dev/sdk/go"
	"operon.dev/sdk/go/operontest"
)

func greeting(message string) operon.Object {
	return operon.Object{
		"apiVersion": "demo.operon.dev/v1alpha1",
		"kind":       "Greeting",
		"metadata":   map[string]any{"name": "hello", "namespace": "default", "generation": 2},
		"spec":       map[string]any{"message": message},
	}
}

func TestAGreetingShouldWantItsConfigMap(t *testing.T) {
	got, err := operontest.Reconcile(Greeter{}, nil, operontest.Request(greeting("hi")))
	if err != nil {
		t.Fatal(err)
	}
	configMap := got.Find("ConfigMap", "hello-greeting")
	if configMap == nil || configMap.String("data", "message") != "hi" {
		t.Fatalf("desired: %v", got.Desired)
	}
	if published, _ := got.Status.Lookup("published"); published != false {
		t.Errorf("status: %v", got.Status)
	}
}

func TestStatusShouldSayWhetherTheConfigMapExists(t *testing.T) {
	existing := operon.NewObject(operon.ConfigMapKind, "hello-greeting")
	got, err := operontest.Reconcile(Greeter{}, nil, operontest.Request(greeting("hi")).Child(existing))
	if err != nil {
		t.Fatal(err)
	}
	if published, _ := got.Status.Lookup("published"); published != true {
		t.Errorf("status: %v", got.Status)
	}
}

func TestAnEmptyMessageShouldBeTerminal(t *testing.T) {
	_, err := operontest.Reconcile(Greeter{}, nil, operontest.Request(greeting("")))
	if err == nil || err.Error() != "terminal failure: spec.message must not be empty" {
		t.Errorf("got %v", err)
	}
}
