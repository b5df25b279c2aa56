package main

// The WebApp reconciler, written the ordinary kubebuilder way: reads from
// the manager's cache, finalizer with controllerutil + Update,
// CreateOrUpdate of the children with a controller reference, Status().Update
// (skipped when the status is already current), events through the
// manager's recorder.

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// writes counts the API writes per kind of write (webapp_writes_total on
// /metrics), so that the benchmark can print them beside Operon's.
var writes = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "webapp_writes_total",
	Help: "API writes of the WebApp controller by operation (finalizer, apply, delete, status, event)",
}, []string{"operation"})

func init() {
	metrics.Registry.MustRegister(writes)
}

// WebAppReconciler reconciles WebApps.
type WebAppReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder record.EventRecorder
}

// +kubebuilder:rbac:groups=example.operon.dev,resources=webapps,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=example.operon.dev,resources=webapps/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile moves the cluster towards what one WebApp asks for.
func (r *WebAppReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	// The benchmark reads this line (--zap-log-level=debug) as "reconcile
	// started" for the object.
	log.V(1).Info("reconcile start", "object", req.Namespace+"/"+req.Name)

	var webapp WebApp
	if err := r.Get(ctx, req.NamespacedName, &webapp); err != nil {
		// Deleted: Kubernetes garbage-collects the children.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !webapp.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(&webapp, Finalizer) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, r.finalize(ctx, &webapp)
	}
	if !controllerutil.ContainsFinalizer(&webapp, Finalizer) {
		controllerutil.AddFinalizer(&webapp, Finalizer)
		if err := r.Update(ctx, &webapp); err != nil {
			return ctrl.Result{}, err
		}
		writes.WithLabelValues("finalizer").Inc()
	}
	// The time of this reconcile, as the host stamps request.now: a
	// condition that changes status takes it as its lastTransitionTime.
	now := Timestamp(time.Now())

	name := webapp.Name
	var children Children
	if d := (&appsv1.Deployment{}); r.owned(ctx, &webapp, d) {
		children.Deployment = d
	}
	if s := (&corev1.Service{}); r.owned(ctx, &webapp, s) {
		children.Service = s
	}
	existingIngress := &networkingv1.Ingress{}
	hadIngress := r.owned(ctx, &webapp, existingIngress)
	if hadIngress {
		children.Ingress = existingIngress
	}
	previous := webapp.Status

	if err := Check(&webapp); err != nil {
		// Terminal, with a status that says so (Ready False, InvalidSpec),
		// as Operon writes the status a guest's terminal failure carries.
		status := InvalidStatus(webapp.Generation, previous, children.Deployment, err.Error(), now)
		if err := r.updateStatus(ctx, &webapp, previous, status); err != nil {
			return ctrl.Result{}, err
		}
		r.event(&webapp, corev1.EventTypeWarning, "ReconcileTerminal", err.Error())
		return ctrl.Result{}, reconcile.TerminalError(err)
	}

	// The Ready condition follows the children's readiness, rated from the
	// objects just read (readiness.go), as the host rates a guest's children.
	status := ComputeStatus(name, &webapp.Spec, webapp.Generation, previous, children, now)
	events := Events(name, &webapp.Spec, children.Deployment, hadIngress, previous, &status)

	// Children.
	meta := metav1.ObjectMeta{Name: name, Namespace: webapp.Namespace}
	d := &appsv1.Deployment{ObjectMeta: meta}
	if err := r.apply(ctx, &webapp, d, func() { MutateDeployment(d, name, &webapp.Spec) }); err != nil {
		return ctrl.Result{}, err
	}
	s := &corev1.Service{ObjectMeta: *meta.DeepCopy()}
	if err := r.apply(ctx, &webapp, s, func() { MutateService(s, name, &webapp.Spec) }); err != nil {
		return ctrl.Result{}, err
	}
	if webapp.Spec.Ingress != nil {
		in := &networkingv1.Ingress{ObjectMeta: *meta.DeepCopy()}
		if err := r.apply(ctx, &webapp, in, func() { MutateIngress(in, name, webapp.Spec.Ingress) }); err != nil {
			return ctrl.Result{}, err
		}
	} else if hadIngress {
		if err := r.deleteChild(ctx, existingIngress); err != nil {
			return ctrl.Result{}, err
		}
	}

	if err := r.updateStatus(ctx, &webapp, previous, status); err != nil {
		return ctrl.Result{}, err
	}
	for _, e := range events {
		r.event(&webapp, corev1.EventTypeNormal, e.Reason, e.Message)
	}
	return ctrl.Result{}, nil
}

// updateStatus writes status, only when it differs from previous (a kept
// lastTransitionTime makes a steady state's status equal).
func (r *WebAppReconciler) updateStatus(ctx context.Context, webapp *WebApp, previous *WebAppStatus, status WebAppStatus) error {
	if previous != nil && equality.Semantic.DeepEqual(*previous, status) {
		return nil
	}
	webapp.Status = &status
	if err := r.Status().Update(ctx, webapp); err != nil {
		return err
	}
	writes.WithLabelValues("status").Inc()
	return nil
}

// finalize handles a deleted WebApp that still has the finalizer: the
// children are deleted, a Cleanup event recorded, the finalizer removed.
func (r *WebAppReconciler) finalize(ctx context.Context, webapp *WebApp) error {
	for _, child := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &networkingv1.Ingress{}} {
		if r.owned(ctx, webapp, child) {
			if err := r.deleteChild(ctx, child); err != nil {
				return err
			}
		}
	}
	cleanup := CleanupEvent(webapp.Name)
	r.event(webapp, corev1.EventTypeNormal, cleanup.Reason, cleanup.Message)
	controllerutil.RemoveFinalizer(webapp, Finalizer)
	if err := r.Update(ctx, webapp); err != nil {
		return err
	}
	writes.WithLabelValues("finalizer").Inc()
	return nil
}

// owned reads the child named after the WebApp from the cache into obj and
// says whether it exists and the WebApp controls it.
func (r *WebAppReconciler) owned(ctx context.Context, webapp *WebApp, obj client.Object) bool {
	key := types.NamespacedName{Namespace: webapp.Namespace, Name: webapp.Name}
	if err := r.Get(ctx, key, obj); err != nil {
		return false
	}
	return metav1.IsControlledBy(obj, webapp)
}

// apply is CreateOrUpdate with a controller reference to the WebApp.
func (r *WebAppReconciler) apply(ctx context.Context, webapp *WebApp, obj client.Object, mutate func()) error {
	result, err := controllerutil.CreateOrUpdate(ctx, r.Client, obj, func() error {
		mutate()
		return controllerutil.SetControllerReference(webapp, obj, r.Scheme)
	})
	if err != nil {
		return err
	}
	if result != controllerutil.OperationResultNone {
		writes.WithLabelValues("apply").Inc()
	}
	return nil
}

func (r *WebAppReconciler) deleteChild(ctx context.Context, obj client.Object) error {
	uid := obj.GetUID()
	err := r.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	writes.WithLabelValues("delete").Inc()
	return nil
}

func (r *WebAppReconciler) event(webapp *WebApp, kind, reason, message string) {
	r.Recorder.Event(webapp, kind, reason, message)
	writes.WithLabelValues("event").Inc()
}

// parentChanged is Operon's default predicate for the parent kind: an update
// counts when the generation, labels, annotations, finalizers or the
// deletionTimestamp changed. Creates, deletes and generic events count.
func parentChanged() predicate.Predicate {
	return predicate.Or(
		predicate.GenerationChangedPredicate{},
		predicate.LabelChangedPredicate{},
		predicate.AnnotationChangedPredicate{},
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			if e.ObjectOld == nil || e.ObjectNew == nil {
				return false
			}
			return !equality.Semantic.DeepEqual(e.ObjectOld.GetFinalizers(), e.ObjectNew.GetFinalizers()) ||
				!equality.Semantic.DeepEqual(e.ObjectOld.GetDeletionTimestamp(), e.ObjectNew.GetDeletionTimestamp())
		}},
	)
}

// SetupWithManager registers the controller: For WebApp (with the parent
// predicate), Owns Deployment, Service and Ingress (every change counts).
func (r *WebAppReconciler) SetupWithManager(mgr ctrl.Manager, maxConcurrentReconciles int) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&WebApp{}, builder.WithPredicates(parentChanged())).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&networkingv1.Ingress{}).
		Named("webapp").
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles}).
		Complete(r)
}
