// The scale bench's "go" peer (bench/scale_bench.py): what a Go controller keeps of the
// opted-in Running pods, a client-go shared informer over the metadata client (what
// metadatainformer builds, without importing client-go/informers and every typed API with
// it). Once synced it prints one JSON line {"ready": true, "pods": N} and stays alive until
// its stdin closes, like `scale_peers.py list`.
//
// On the wire: protobuf, with nothing set here. In client-go v0.34.4, metadata.NewForConfig
// (metadata.ConfigFor) sets AcceptContentTypes "application/vnd.kubernetes.protobuf,
// application/json" and ContentType protobuf, and its List and Watch send
// Accept: application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1
// (then the JSON forms) (metadata/metadata.go).
//
// Two ways a Go engineer makes it cheaper, as the bench's stronger peers:
//   - a streaming list (KEP-3157): the bench sets KUBE_FEATURE_WatchListClient=true, which
//     client-go's reflector reads (the same path linkerd-config's informers use);
//   - --trim: a transform (SharedIndexInformer.SetTransform, as controller-runtime's
//     TransformStripManagedFields and cache options do) keeping of each pod only what the
//     controller's decisions read: name, namespace, resourceVersion, uid, owners, and the
//     labels and annotations named by --keep-labels and --keep-annotations.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig")
	trim := flag.Bool("trim", false, "keep only what the decisions read (a transform)")
	keepLabels := flag.String("keep-labels", "", "labels kept with --trim, comma-separated")
	keepAnnotations := flag.String("keep-annotations", "", "annotations kept with --trim")
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		panic(err)
	}
	client, err := metadata.NewForConfig(config)
	if err != nil {
		panic(err)
	}
	pods := client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"})
	opted := func(o *metav1.ListOptions) {
		o.LabelSelector = "config.linkerd.io/reconcile=auto"
		o.FieldSelector = "status.phase=Running"
	}
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			opted(&o)
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			opted(&o)
			return pods.Watch(ctx, o)
		},
	}, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	if *trim {
		labels, annotations := strings.Split(*keepLabels, ","), strings.Split(*keepAnnotations, ",")
		err := informer.SetTransform(func(obj interface{}) (interface{}, error) {
			pod, ok := obj.(*metav1.PartialObjectMetadata)
			if !ok {
				return obj, nil // a tombstone: the store handles it
			}
			return &metav1.PartialObjectMetadata{
				TypeMeta: pod.TypeMeta,
				ObjectMeta: metav1.ObjectMeta{
					Name:            pod.Name,
					Namespace:       pod.Namespace,
					ResourceVersion: pod.ResourceVersion,
					UID:             pod.UID,
					OwnerReferences: pod.OwnerReferences,
					Labels:          pick(pod.Labels, labels),
					Annotations:     pick(pod.Annotations, annotations),
				},
			}, nil
		})
		if err != nil {
			panic(err)
		}
	}
	stop := make(chan struct{})
	go informer.Run(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced) {
		os.Exit(1)
	}
	line, _ := json.Marshal(map[string]any{"ready": true, "pods": len(informer.GetStore().ListKeys())})
	os.Stdout.Write(append(line, '\n'))
	io.Copy(io.Discard, os.Stdin)
	close(stop)
}

// pick: the entries of m under keys, nil when none.
func pick(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}
