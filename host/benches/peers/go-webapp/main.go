// Command go-webapp is the WebApp controller of guest-examples/rust-webapp
// written the ordinary kubebuilder way with controller-runtime: the peer a
// platform team would otherwise run. `cargo xtask bench manager` builds it
// (go build, binary under target/peers/) and runs it beside Operon and a
// native kube-rs controller against the same control plane.
//
// `go-webapp webhook [flags]` serves the WebApp's validating and defaulting
// admission webhooks instead (webhook.go), for `cargo xtask bench admission`.
//
// Flags of the controller: --kubeconfig (controller-runtime's), --namespace,
// --max-concurrent-reconciles, --metrics-bind-address,
// --health-probe-bind-address, --leader-elect, and the zap flags
// (--zap-log-level, --zap-encoder, --zap-time-encoding, ...).
package main

import (
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(SchemeBuilder.AddToScheme(scheme))
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "webhook" {
		runWebhook(os.Args[2:])
		return
	}
	var metricsAddr, probeAddr, namespace string
	var leaderElect bool
	var maxConcurrentReconciles int
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "The address the metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to; 0 disables it.")
	flag.StringVar(&namespace, "namespace", "", "Watch and act in this namespace only (default: all namespaces).")
	flag.IntVar(&maxConcurrentReconciles, "max-concurrent-reconciles", 1, "Reconciles of different objects running at once.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Use a Lease so that only one replica reconciles.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	options := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "go-webapp.example.operon.dev",
	}
	if namespace != "" {
		options.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}}
		options.LeaderElectionNamespace = namespace
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), options)
	if err != nil {
		setupLog.Error(err, "unable to create the manager")
		os.Exit(1)
	}
	reconciler := &WebAppReconciler{
		Client:   mgr.GetClient(),
		Scheme:   mgr.GetScheme(),
		Recorder: mgr.GetEventRecorderFor("go-webapp"),
	}
	if err := reconciler.SetupWithManager(mgr, maxConcurrentReconciles); err != nil {
		setupLog.Error(err, "unable to create the controller", "controller", "webapp")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up the ready check")
		os.Exit(1)
	}
	setupLog.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}
