// status-readers: how other tools' own code reads a LinkerdConfig (issue 38). Not ours:
// each subcommand calls the tool's library as the tool does.
//
//	status-readers kstatus FILE
//	    kstatus's status.Compute (sigs.k8s.io/cli-utils, what Helm 4's --wait reads) on the
//	    object in FILE (JSON); prints {"status", "message"}.
//	status-readers flux-wait --kubeconfig KC --group G --kind K --name N [--namespace NS]
//	        [--timeout 4m] [--interval 2s]
//	    Flux's wait (github.com/fluxcd/pkg/ssa ResourceManager.WaitForSetWithContext,
//	    fail-fast, on Flux's kstatus fork) as kustomize-controller runs it with wait: true;
//	    prints {"ready", "error", "seconds"}.
//	status-readers argocd-health SCRIPT FILE
//	    a resource health script (health.lua) run under gopher-lua, the Lua VM Argo CD runs,
//	    with the libraries Argo CD opens, on the object in FILE; prints {"status", "message"}.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: status-readers kstatus|flux-wait|argocd-health ...")
	}
	switch os.Args[1] {
	case "kstatus":
		kstatus(os.Args[2:])
	case "flux-wait":
		fluxWait(os.Args[2:])
	case "argocd-health":
		argocdHealth(os.Args[2:])
	default:
		fail("unknown command " + os.Args[1])
	}
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, message)
	os.Exit(1)
}

func emit(v any) {
	out, err := json.Marshal(v)
	if err != nil {
		fail(err.Error())
	}
	fmt.Println(string(out))
}

func readObject(path string) map[string]any {
	data, err := os.ReadFile(path)
	if err != nil {
		fail(err.Error())
	}
	// As client-go decodes objects: whole numbers as int64, as unstructured expects.
	var obj map[string]any
	if err := utiljson.Unmarshal(data, &obj); err != nil {
		fail(err.Error())
	}
	return obj
}

func kstatus(args []string) {
	if len(args) != 1 {
		fail("usage: status-readers kstatus FILE")
	}
	result, err := status.Compute(&unstructured.Unstructured{Object: readObject(args[0])})
	if err != nil {
		fail(err.Error())
	}
	emit(map[string]string{"status": result.Status.String(), "message": result.Message})
}

func fluxWait(args []string) {
	flags := flag.NewFlagSet("flux-wait", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "")
	group := flags.String("group", "", "")
	kind := flags.String("kind", "", "")
	name := flags.String("name", "", "")
	namespace := flags.String("namespace", "", "")
	timeout := flags.Duration("timeout", 4*time.Minute, "")
	interval := flags.Duration("interval", 2*time.Second, "")
	_ = flags.Parse(args)
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err.Error())
	}
	// As kustomize-controller builds its manager: a dynamic REST mapper, a
	// controller-runtime client and Flux's status poller.
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		fail(err.Error())
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		fail(err.Error())
	}
	kube, err := client.New(cfg, client.Options{Mapper: mapper})
	if err != nil {
		fail(err.Error())
	}
	poller := polling.NewStatusPoller(kube, mapper, polling.Options{})
	manager := ssa.NewResourceManager(kube, poller, ssa.Owner{
		Field: "kustomize-controller", Group: "kustomize.toolkit.fluxcd.io",
	})
	set := object.ObjMetadataSet{{
		GroupKind: schema.GroupKind{Group: *group, Kind: *kind},
		Namespace: *namespace,
		Name:      *name,
	}}
	started := time.Now()
	err = manager.WaitForSetWithContext(context.Background(), set, ssa.WaitOptions{
		Interval: *interval, Timeout: *timeout, FailFast: true,
	})
	said := ""
	if err != nil {
		said = err.Error()
	}
	emit(map[string]any{"ready": err == nil, "error": said, "seconds": time.Since(started).Seconds()})
}

func argocdHealth(args []string) {
	if len(args) != 2 {
		fail("usage: status-readers argocd-health SCRIPT FILE")
	}
	script, err := os.ReadFile(args[0])
	if err != nil {
		fail(err.Error())
	}
	// As Argo CD's util/lua VM: no libraries but those it opens (no io, no os but its safe
	// subset, which a health script has no use for).
	state := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer state.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
	} {
		state.Push(state.NewFunction(lib.open))
		state.Push(lua.LString(lib.name))
		state.Call(1, 0)
	}
	state.SetGlobal("obj", toLua(state, readObject(args[1])))
	if err := state.DoString(string(script)); err != nil {
		fail(err.Error())
	}
	returned := state.Get(-1)
	table, ok := returned.(*lua.LTable)
	if !ok {
		fail(fmt.Sprintf("the script returned %s, not a table", returned.Type()))
	}
	emit(map[string]string{
		"status":  table.RawGetString("status").String(),
		"message": table.RawGetString("message").String(),
	})
}

// toLua converts JSON as Argo CD's decodeValue does: objects and arrays become tables
// (arrays 1-based), numbers LNumber, booleans LBool, null LNil.
func toLua(state *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case map[string]any:
		table := state.NewTable()
		for key, item := range v {
			table.RawSetString(key, toLua(state, item))
		}
		return table
	case []any:
		table := state.NewTable()
		for i, item := range v {
			table.RawSetInt(i+1, toLua(state, item))
		}
		return table
	case string:
		return lua.LString(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case bool:
		return lua.LBool(v)
	default:
		return lua.LNil
	}
}
