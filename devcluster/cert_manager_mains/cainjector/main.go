// Command cainjector runs cert-manager's CA injector for linkerd-config's local control plane.
//
// The injectors (which copy a Certificate's CA into the caBundle of an annotated webhook
// configuration, CRD conversion webhook or APIService) are cert-manager's own, from the Go
// module github.com/cert-manager/cert-manager at the version go.mod requires. Only this file
// is ours. cert-manager's main for this binary (cmd/cainjector in its repository) is a
// separate module, github.com/cert-manager/cert-manager/cainjector-binary, that is never
// published. This file stands in for it. It reads the configuration, builds
// controller-runtime's manager as cert-manager's does, and registers cert-manager's
// injectors.
//
// The configuration is a CAInjectorConfiguration file
// (cainjector.config.cert-manager.io/v1alpha1), the same file cert-manager's --config reads.
// cert-manager's own loader reads it, cert-manager's defaults fill in what it leaves out, and
// cert-manager's validation checks it. metricsListenAddress is served as cert-manager serves
// it, but only over plain HTTP ("0" turns it off). It runs one replica without leader
// election (it refuses leaderElectionConfig.enabled) and serves no pprof (it refuses
// enablePprof).
//
// Flags: --config=FILE (required), and --ready-file=FILE, which is written once the manager's
// caches have synced and its controllers have been started.
//
// The module is named under github.com/cert-manager/cert-manager/ so that it may import
// cert-manager's internal packages (see ../controller/main.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	config "github.com/cert-manager/cert-manager/internal/apis/config/cainjector"
	"github.com/cert-manager/cert-manager/internal/apis/config/cainjector/validation"
	_ "github.com/cert-manager/cert-manager/internal/cainjector/feature" // registers its gates
	"github.com/cert-manager/cert-manager/internal/cmd/util"
	"github.com/cert-manager/cert-manager/internal/kube"
	cainjectorconfigfile "github.com/cert-manager/cert-manager/pkg/cainjector/configfile"
	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	cmutil "github.com/cert-manager/cert-manager/pkg/util"
	"github.com/cert-manager/cert-manager/pkg/util/configfile"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"
)

func main() {
	ctx, exit := util.SetupExitHandler(context.Background(), util.GracefulShutdown)
	defer exit() // may call os.Exit, so deferred first

	configPath := flag.String("config", "", "a CAInjectorConfiguration file (required)")
	readyFile := flag.String("ready-file", "", "written once the injectors have started")
	flag.Parse()

	logf.InitLogs()
	defer logf.FlushLogs()
	ctx = logf.NewContext(ctx, logf.Log, "cainjector")

	if err := run(ctx, *configPath, *readyFile); err != nil {
		logf.Log.Error(err, "cert-manager cainjector failed")
		util.SetExitCode(err)
	}
}

func load(path string) (*config.CAInjectorConfiguration, error) {
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
	file := cainjectorconfigfile.New()
	if err := loader.Load(file); err != nil {
		return nil, fmt.Errorf("loading %s: %w", abs, err)
	}
	cfg := file.Config
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(cfg.FeatureGates); err != nil {
		return nil, fmt.Errorf("feature gates: %w", err)
	}
	if errs := validation.ValidateCAInjectorConfiguration(cfg, nil); len(errs) > 0 {
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
	log.Info("starting cert-manager ca-injector", "version", version.GitVersion, "go_version", version.GoVersion)

	restConfig, err := kube.BuildClientConfig("", cfg.KubeConfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	restConfig = cmutil.RestConfigWithUserAgent(restConfig, "cainjector")

	var namespaces map[string]cache.Config
	if cfg.Namespace != "" {
		namespaces = map[string]cache.Config{cfg.Namespace: {}}
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		Cache: cache.Options{
			ReaderFailOnMissingInformer: true,
			DefaultNamespaces:           namespaces,
		},
		// As cert-manager's cainjector: Secrets are read from the API server when needed,
		// never cached (clusters hold many, and large ones).
		Client: client.Options{
			Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}},
		},
		LeaderElection: false,
		Metrics:        metricsserver.Options{BindAddress: cfg.MetricsListenAddress},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	if cfg.EnableDataSourceConfig.Certificates {
		if err := waitForCertificatesCRD(ctx, mgr); err != nil {
			return err
		}
	}

	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    cfg.Namespace,
		IgnoreNamespaces:             cfg.IgnoreNamespaces,
		EnableCertificatesDataSource: cfg.EnableDataSourceConfig.Certificates,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   cfg.EnableInjectableConfig.MutatingWebhookConfigurations,
			cainjector.ValidatingWebhookConfigurationName: cfg.EnableInjectableConfig.ValidatingWebhookConfigurations,
			cainjector.APIServiceName:                     cfg.EnableInjectableConfig.APIServices,
			cainjector.CustomResourceDefinitionName:       cfg.EnableInjectableConfig.CustomResourceDefinitions,
		},
	})
	if err != nil {
		return fmt.Errorf("registering the injectors: %w", err)
	}

	// The manager starts this with its controllers, once its caches have synced.
	ready := manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil // shutting down
		}
		log.Info("caches synced; injectors running")
		return writeReady(readyFile)
	})
	if err := mgr.Add(ready); err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// waitForCertificatesCRD waits, as cert-manager's cainjector does, up to five minutes for the
// Certificate CRD it reads CAs from.
func waitForCertificatesCRD(ctx context.Context, mgr manager.Manager) error {
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	log := logf.FromContext(ctx)
	return wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		crd := apiext.CustomResourceDefinition{}
		err := direct.Get(ctx, types.NamespacedName{Name: "certificates.cert-manager.io"}, &crd)
		if apierrors.IsNotFound(err) {
			log.Info("waiting for the certificates.cert-manager.io CRD")
			return false, nil
		}
		return err == nil, err
	})
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
