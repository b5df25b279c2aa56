package main

// `go-webapp webhook`: the WebApp's validating and defaulting webhooks
// (admission.go) served by controller-runtime's webhook.Server, as a
// kubebuilder project's manager serves them, but without the manager (it
// would add nothing to a webhook call: the manager only starts this same
// server). `cargo xtask bench admission` runs it beside Operon's webhook
// server against one API server.
//
// Flags: --cert-dir (tls.crt and tls.key, watched for rotation by
// controller-runtime's certwatcher), --host, --port, --enable-http2 (off, as
// kubebuilder's scaffold has it since CVE-2023-44487; Operon's server speaks
// HTTP/1.1 too), and the zap flags.

import (
	"crypto/tls"
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// The paths kubebuilder gives a kind's webhooks.
const (
	MutatePath   = "/mutate-example-operon-dev-v1alpha1-webapp"
	ValidatePath = "/validate-example-operon-dev-v1alpha1-webapp"
)

func runWebhook(args []string) {
	flags := flag.NewFlagSet("webhook", flag.ExitOnError)
	certDir := flags.String("cert-dir", "", "The directory holding tls.crt and tls.key.")
	host := flags.String("host", "127.0.0.1", "The address the webhook server listens on.")
	port := flags.Int("port", 9443, "The port the webhook server listens on.")
	enableHTTP2 := flags.Bool("enable-http2", false, "Offer HTTP/2 as well as HTTP/1.1.")
	opts := zap.Options{}
	opts.BindFlags(flags)
	_ = flags.Parse(args)
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	var tlsOpts []func(*tls.Config)
	if !*enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	server := webhook.NewServer(webhook.Options{Host: *host, Port: *port, CertDir: *certDir, TLSOpts: tlsOpts})
	server.Register(MutatePath, &webhook.Admission{Handler: Defaulter{}})
	server.Register(ValidatePath, &webhook.Admission{Handler: Validator{}})
	setupLog.Info("starting webhook server")
	if err := server.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running the webhook server")
		os.Exit(1)
	}
}
