// Command controller runs cert-manager's controllers for linkerd-config's local control plane.
//
// Every controller, issuer and client here is cert-manager's own, from the Go module
// github.com/cert-manager/cert-manager at the version go.mod requires. Only this file is ours.
// cert-manager's own main for this binary (cmd/controller in its repository) is a separate
// module, github.com/cert-manager/cert-manager/controller-binary, that is never published:
// `go mod download` cannot fetch it, and the published module leaves its folder out. This
// file stands in for it. It reads the configuration and starts the controllers. It does
// not load cert-manager's command-line flags; the configuration comes from a file instead.
//
// The configuration is a ControllerConfiguration file
// (controller.config.cert-manager.io/v1alpha1), the same file cert-manager's --config
// reads. cert-manager's own loader reads it, cert-manager's defaults fill in what it leaves
// out, and cert-manager's validation checks it. The controllers that run are the ones its
// `controllers` list enables, with cert-manager's meaning of "*" and "-name".
//
// What this file does not do, with the reason:
//   - It runs one replica without leader election. It refuses leaderElectionConfig.enabled.
//   - It serves no metrics, healthz or pprof. The local control plane reads none of them, so
//     metricsListenAddress and healthzListenAddress are ignored. It refuses enablePprof.
//
// Flags: --config=FILE (required), and --ready-file=FILE, which is written once the informer
// caches have synced and every enabled controller has started.
//
// The module is named under github.com/cert-manager/cert-manager/ (see go.mod) because Go
// lets code import internal/ packages only from inside the tree that holds them. Upstream's
// own binaries are separate modules named the same way. Doing likewise lets us use
// cert-manager's defaults, validation and exit handling instead of copies of them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"

	config "github.com/cert-manager/cert-manager/internal/apis/config/controller"
	defaults "github.com/cert-manager/cert-manager/internal/apis/config/controller/v1alpha1"
	"github.com/cert-manager/cert-manager/internal/apis/config/controller/validation"
	"github.com/cert-manager/cert-manager/internal/cmd/util"
	"github.com/cert-manager/cert-manager/internal/controller/feature"
	"github.com/cert-manager/cert-manager/internal/pem"
	"github.com/cert-manager/cert-manager/pkg/controller"
	shimgateways "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/gateways"
	shimlistenerset "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/listenerset"
	controllerconfigfile "github.com/cert-manager/cert-manager/pkg/controller/configfile"
	dnsutil "github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/util"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	cmutil "github.com/cert-manager/cert-manager/pkg/util"
	"github.com/cert-manager/cert-manager/pkg/util/configfile"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"

	// The controllers and issuer types cert-manager's controller binary links in. Each
	// registers itself when imported (the certificates and certificaterequests controllers
	// come in through the defaults package).
	_ "github.com/cert-manager/cert-manager/pkg/controller/acmechallenges"
	_ "github.com/cert-manager/cert-manager/pkg/controller/acmeorders"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/ingresses"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/acme"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/vault"
)

func main() {
	ctx, exit := util.SetupExitHandler(context.Background(), util.GracefulShutdown)
	defer exit() // may call os.Exit, so deferred first

	configPath := flag.String("config", "", "a ControllerConfiguration file (required)")
	readyFile := flag.String("ready-file", "", "written once every enabled controller has started")
	flag.Parse()

	logf.InitLogs()
	defer logf.FlushLogs()
	ctx = logf.NewContext(ctx, logf.Log, "controller")

	if err := run(ctx, *configPath, *readyFile); err != nil {
		logf.Log.Error(err, "cert-manager controller failed")
		util.SetExitCode(err)
	}
}

func load(path string) (*config.ControllerConfiguration, error) {
	if path == "" {
		return nil, errors.New("--config is required")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	loader, err := configfile.NewConfigurationFSLoader(nil, abs)
	if err != nil {
		return nil, err
	}
	file := controllerconfigfile.New()
	if err := loader.Load(file); err != nil {
		return nil, fmt.Errorf("loading %s: %w", abs, err)
	}
	cfg := file.Config
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(cfg.FeatureGates); err != nil {
		return nil, fmt.Errorf("feature gates: %w", err)
	}
	if errs := validation.ValidateControllerConfiguration(cfg, nil); len(errs) > 0 {
		return nil, fmt.Errorf("invalid configuration: %w", errs.ToAggregate())
	}
	if err := logf.ValidateAndApply(&cfg.Logging); err != nil {
		return nil, fmt.Errorf("logging: %w", err)
	}
	if cfg.LeaderElectionConfig.Enabled {
		return nil, errors.New("this build runs without leader election: set leaderElectionConfig.enabled to false")
	}
	if cfg.EnablePprof {
		return nil, errors.New("this build serves no profiler: leave enablePprof unset")
	}
	return cfg, nil
}

func run(ctx context.Context, configPath, readyFile string) error {
	cfg, err := load(configPath)
	if err != nil {
		return err
	}
	log := logf.FromContext(ctx)
	version := cmutil.VersionInfo()
	log.Info("starting cert-manager controller", "version", version.GitVersion, "go_version", version.GoVersion)

	limits := cfg.PEMSizeLimitsConfig
	pem.SetGlobalSizeLimits(pem.NewSizeLimitsFromConfig(
		limits.MaxCertificateSize, limits.MaxPrivateKeySize, limits.MaxChainLength, limits.MaxBundleSize))

	options, err := contextOptions(cfg)
	if err != nil {
		return err
	}
	factory, err := controller.NewContextFactory(ctx, options)
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}

	enabled := enabledControllers(cfg)
	log.Info("enabled controllers", "controllers", sets.List(enabled))
	if missing := enabled.Difference(sets.KeySet(controller.Known())); missing.Len() > 0 {
		log.Info("enabled but not in this build, so not run", "controllers", sets.List(missing))
	}
	group, ctx := errgroup.WithContext(ctx)
	for name, construct := range controller.Known() {
		if !enabled.Has(name) {
			continue
		}
		loop, err := construct(factory)
		if err != nil {
			return fmt.Errorf("starting controller %s: %w", name, err)
		}
		group.Go(func() error { return loop.Run(cfg.NumberOfConcurrentWorkers, ctx) })
	}

	// The controllers asked for their informers when they were constructed; start them all.
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	gatewayAPI := utilfeature.DefaultFeatureGate.Enabled(feature.ExperimentalGatewayAPISupport) && cfg.GatewayAPIConfig.Enabled
	if gatewayAPI {
		base.GWShared.Start(ctx.Done())
	}

	group.Go(func() error {
		synced := map[string]bool{}
		for informer, ok := range base.SharedInformerFactory.WaitForCacheSync(ctx.Done()) {
			synced[informer.String()] = ok
		}
		for informer, ok := range base.KubeSharedInformerFactory.WaitForCacheSync(ctx.Done()) {
			synced[informer] = ok
		}
		for informer, ok := range base.HTTP01ResourceMetadataInformersFactory.WaitForCacheSync(ctx.Done()) {
			synced[informer.String()] = ok
		}
		if ctx.Err() != nil {
			return nil // shutting down before the caches synced
		}
		for informer, ok := range synced {
			if !ok {
				return fmt.Errorf("informer %s never synced", informer)
			}
		}
		log.Info("informer caches synced; controllers running", "informers", len(synced))
		return writeReady(readyFile)
	})

	err = group.Wait()
	if gatewayAPI {
		base.GWShared.Shutdown()
	}
	base.HTTP01ResourceMetadataInformersFactory.Shutdown()
	base.KubeSharedInformerFactory.Shutdown()
	base.SharedInformerFactory.Shutdown()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("control loops exited")
	return nil
}

// enabledControllers gives `controllers` cert-manager's meaning: "*" is its default set,
// "-name" removes one, any other entry adds one; only removals imply "*". Feature gates add
// the controllers they stand for, and a namespaced run drops the cluster-scoped ones.
func enabledControllers(cfg *config.ControllerConfiguration) sets.Set[string] {
	enabled := sets.New[string]()
	disabled := sets.New[string]()
	for _, name := range cfg.Controllers {
		switch {
		case name == "*":
			enabled.Insert(defaults.DefaultEnabledControllers...)
		case strings.HasPrefix(name, "-"):
			disabled.Insert(strings.TrimPrefix(name, "-"))
		default:
			enabled.Insert(name)
		}
	}
	if enabled.Len() == 0 && disabled.Len() > 0 {
		enabled.Insert(defaults.DefaultEnabledControllers...)
	}
	gates := utilfeature.DefaultFeatureGate
	if gates.Enabled(feature.ExperimentalCertificateSigningRequestControllers) {
		enabled.Insert(defaults.ExperimentalCertificateSigningRequestControllers...)
	}
	if gates.Enabled(feature.ExperimentalGatewayAPISupport) && cfg.GatewayAPIConfig.Enabled {
		enabled.Insert(shimgateways.ControllerName)
	}
	if gates.Enabled(feature.ListenerSets) && cfg.GatewayAPIConfig.Enabled && cfg.GatewayAPIConfig.EnableListenerSet {
		enabled.Insert(shimlistenerset.ControllerName)
	}
	if cfg.Namespace != "" {
		enabled.Delete(defaults.ClusterScopedControllers...)
	}
	return enabled.Difference(disabled)
}

// contextOptions maps the configuration onto the options cert-manager's controllers read.
func contextOptions(cfg *config.ControllerConfiguration) (controller.ContextOptions, error) {
	http01 := cfg.ACMEHTTP01Config
	quantities := map[string]*resource.Quantity{}
	for name, value := range map[string]string{
		"solverResourceRequestCPU":    http01.SolverResourceRequestCPU,
		"solverResourceRequestMemory": http01.SolverResourceRequestMemory,
		"solverResourceLimitsCPU":     http01.SolverResourceLimitsCPU,
		"solverResourceLimitsMemory":  http01.SolverResourceLimitsMemory,
	} {
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return controller.ContextOptions{}, fmt.Errorf("acmeHTTP01Config.%s: %w", name, err)
		}
		quantities[name] = &q
	}
	nameservers := cfg.ACMEDNS01Config.RecursiveNameservers
	if len(nameservers) == 0 {
		nameservers = dnsutil.RecursiveNameservers
	}
	return controller.ContextOptions{
		APIServerHost:      cfg.APIServerHost,
		Kubeconfig:         cfg.KubeConfig,
		KubernetesAPIQPS:   cfg.KubernetesAPIQPS,
		KubernetesAPIBurst: cfg.KubernetesAPIBurst,
		Namespace:          cfg.Namespace,
		ACMEOptions: controller.ACMEOptions{
			HTTP01SolverImage:                 http01.SolverImage,
			HTTP01SolverResourceRequestCPU:    *quantities["solverResourceRequestCPU"],
			HTTP01SolverResourceRequestMemory: *quantities["solverResourceRequestMemory"],
			HTTP01SolverResourceLimitsCPU:     *quantities["solverResourceLimitsCPU"],
			HTTP01SolverResourceLimitsMemory:  *quantities["solverResourceLimitsMemory"],
			ACMEHTTP01SolverRunAsNonRoot:      http01.SolverRunAsNonRoot,
			HTTP01SolverRuntimeClassName:      http01.SolverRuntimeClassName,
			HTTP01SolverNameservers:           http01.SolverNameservers,
			HTTP01SolverExtraLabels:           http01.SolverExtraLabels,
			DNS01Nameservers:                  nameservers,
			DNS01CheckRetryPeriod:             cfg.ACMEDNS01Config.CheckRetryPeriod,
			DNS01CheckAuthoritative:           !cfg.ACMEDNS01Config.RecursiveNameserversOnly,
		},
		SchedulerOptions: controller.SchedulerOptions{
			MaxConcurrentChallenges: cfg.MaxConcurrentChallenges,
		},
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace:        cfg.ClusterResourceNamespace,
			ClusterIssuerAmbientCredentials: cfg.ClusterIssuerAmbientCredentials,
			IssuerAmbientCredentials:        cfg.IssuerAmbientCredentials,
		},
		IngressShimOptions: controller.IngressShimOptions{
			DefaultIssuerName:                 cfg.IngressShimConfig.DefaultIssuerName,
			DefaultIssuerKind:                 cfg.IngressShimConfig.DefaultIssuerKind,
			DefaultIssuerGroup:                cfg.IngressShimConfig.DefaultIssuerGroup,
			DefaultAutoCertificateAnnotations: cfg.IngressShimConfig.DefaultAutoCertificateAnnotations,
			ExtraCertificateAnnotations:       cfg.IngressShimConfig.ExtraCertificateAnnotations,
			GatewayAPIExtraProtocols:          sets.New(cfg.GatewayAPIConfig.ExtraProtocols...),
		},
		CertificateOptions: controller.CertificateOptions{
			EnableOwnerRef:                           cfg.EnableCertificateOwnerRef,
			CopiedAnnotationPrefixes:                 cfg.CopiedAnnotationPrefixes,
			CertificateRequestMinimumBackoffDuration: cfg.CertificateRequestMinimumBackoffDuration,
			CertificateRequestMaximumBackoffDuration: cfg.CertificateRequestMaximumBackoffDuration,
		},
		ConfigOptions: controller.ConfigOptions{
			EnableGatewayAPI:            cfg.GatewayAPIConfig.Enabled,
			EnableGatewayAPIListenerSet: cfg.GatewayAPIConfig.EnableListenerSet,
		},
	}, nil
}

// writeReady creates the file atomically, so a reader never sees it half written.
func writeReady(path string) error {
	if path == "" {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte("ready\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
