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
package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"

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
