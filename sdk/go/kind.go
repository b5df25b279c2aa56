package operon

import (
	"strings"

	"operon.dev/sdk/go/internal/abi"
)

// GVK is a Kubernetes kind: API group (empty for the core group), version
// and kind.
type GVK = abi.GVK

// Kind returns the kind of objects with this apiVersion (`apps/v1`, or
// `v1` for the core group) and kind.
func Kind(apiVersion, kind string) GVK {
	group, version, found := strings.Cut(apiVersion, "/")
	if !found {
		group, version = "", apiVersion
	}
	return GVK{Group: group, Version: version, Kind: kind}
}

// APIVersion returns `group/version`, or `version` for the core group.
func APIVersion(g GVK) string {
	if g.Group == "" {
		return g.Version
	}
	return g.Group + "/" + g.Version
}

// KindString formats g as `apps/v1 Deployment` (`v1 Service` for the core
// group), as the host names kinds in its messages.
func KindString(g GVK) string {
	return APIVersion(g) + " " + g.Kind
}

// Kinds the reconcilers commonly own or read.
var (
	ConfigMapKind  = GVK{Version: "v1", Kind: "ConfigMap"}
	SecretKind     = GVK{Version: "v1", Kind: "Secret"}
	ServiceKind    = GVK{Version: "v1", Kind: "Service"}
	DeploymentKind = GVK{Group: "apps", Version: "v1", Kind: "Deployment"}
	IngressKind    = GVK{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}
)
