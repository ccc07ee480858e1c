// Command knative-check runs Knative's own defaulting and validation on manifests, without a cluster.
//
// It decodes every Knative object it finds in the YAML files, folders (searched recursively for
// *.yaml and *.yml) or standard input ("-") given as arguments into its Go type from
// knative.dev/eventing and knative.dev/serving, calls SetDefaults(ctx) and then Validate(ctx),
// exactly as the Knative admission webhooks do on create, and prints one line per object:
//
//	OK    <where> <Kind> <namespace>/<name>
//	FAIL  <where> <Kind> <namespace>/<name>: <Knative's error>
//	SKIP  <where> <Kind> <namespace>/<name> (not a Knative object)
//
// Decoding is strict, like the webhooks': an unknown field is an error. Knative kinds that this
// tool does not know are failures, so nothing Knative passes unchecked.
//
// Feature flags come from the inputs, as on a cluster: a ConfigMap config-features in namespace
// knative-eventing (for example eventing/config-features-patch.yaml) is merged over Knative
// Eventing's defaults, and config-br-defaults there (the Broker class and channel a Broker
// without spec.config gets) is used as the eventing webhook uses it; ConfigMaps config-features, config-defaults and config-autoscaler in
// knative-serving over Knative Serving's. Without them, the release defaults apply.
//
// With --emit FILE, it also writes every input document to FILE as a YAML stream (one JSON document
// each), Knative objects as the webhook would store them (after SetDefaults), others unchanged, so
// that a cluster without Knative's webhook can be given exactly what the webhook would admit. FILE
// is written only when every Knative object passed.
//
// Exit status: 0 when every Knative object passed, 1 when one failed, 2 on a usage or read error.
//
// Built by testbed/toolchain.py against knative.dev/eventing and knative.dev/serving at the
// versions pinned there.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"knative.dev/pkg/apis"

	eventingconfig "knative.dev/eventing/pkg/apis/config"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	eventingv1alpha1 "knative.dev/eventing/pkg/apis/eventing/v1alpha1"
	"knative.dev/eventing/pkg/apis/feature"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"

	servingconfig "knative.dev/serving/pkg/apis/config"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	asconfig "knative.dev/serving/pkg/autoscaler/config"
)

// knativeObject is what every Knative API type offers the webhooks.
type knativeObject interface {
	apis.Defaultable
	apis.Validatable
}

// constructors maps "apiVersion/Kind" to a new empty object of the Knative type.
var constructors = map[string]func() knativeObject{
	"eventing.knative.dev/v1/Broker":            func() knativeObject { return &eventingv1.Broker{} },
	"eventing.knative.dev/v1/Trigger":           func() knativeObject { return &eventingv1.Trigger{} },
	"eventing.knative.dev/v1alpha1/EventPolicy": func() knativeObject { return &eventingv1alpha1.EventPolicy{} },
	"sources.knative.dev/v1/ApiServerSource":    func() knativeObject { return &sourcesv1.ApiServerSource{} },
	"sources.knative.dev/v1/PingSource":         func() knativeObject { return &sourcesv1.PingSource{} },
	"sources.knative.dev/v1/SinkBinding":        func() knativeObject { return &sourcesv1.SinkBinding{} },
	"serving.knative.dev/v1/Service":            func() knativeObject { return &servingv1.Service{} },
}

// document is one YAML document of an input, with where it came from.
type document struct {
	where string
	data  []byte
	head  header
}

type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

func (h header) id() string {
	ns := h.Metadata.Namespace
	if ns == "" {
		ns = "-"
	}
	return fmt.Sprintf("%s %s/%s", h.Kind, ns, h.Metadata.Name)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	emit := ""
	if len(args) > 0 && (args[0] == "--emit" || strings.HasPrefix(args[0], "--emit=")) {
		if args[0] == "--emit" && len(args) > 1 {
			emit, args = args[1], args[2:]
		} else {
			emit, args = strings.TrimPrefix(args[0], "--emit="), args[1:]
		}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || (emit == "" && args[0] == "--emit") {
		fmt.Fprintln(stderr, "usage: knative-check [--emit FILE] FILE|DIR|- ...")
		return 2
	}
	var docs []document
	for _, arg := range args {
		found, err := readInput(arg, stdin)
		if err != nil {
			fmt.Fprintf(stderr, "knative-check: %v\n", err)
			return 2
		}
		docs = append(docs, found...)
	}
	ctx, err := webhookContext(docs)
	if err != nil {
		fmt.Fprintf(stderr, "knative-check: %v\n", err)
		return 2
	}
	failed, checked := 0, 0
	var emitted bytes.Buffer
	for _, doc := range docs {
		status, detail, stored := check(ctx, doc)
		emitted.WriteString("---\n")
		emitted.Write(stored)
		emitted.WriteString("\n")
		switch status {
		case "FAIL":
			failed++
			checked++
		case "OK":
			checked++
		}
		fmt.Fprintf(stdout, "%-5s %s %s%s\n", status, doc.where, doc.head.id(), detail)
	}
	fmt.Fprintf(stdout, "%d Knative objects checked, %d failed\n", checked, failed)
	if failed > 0 {
		return 1
	}
	if emit != "" {
		if err := os.WriteFile(emit, emitted.Bytes(), 0o600); err != nil {
			fmt.Fprintf(stderr, "knative-check: %v\n", err)
			return 2
		}
	}
	return 0
}

// readInput returns the non-empty YAML documents of a file, of every *.yaml/*.yml below a folder,
// or of standard input.
func readInput(arg string, stdin io.Reader) ([]document, error) {
	if arg == "-" {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		return splitDocuments("<stdin>", data)
	}
	info, err := os.Stat(arg)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		data, err := os.ReadFile(arg)
		if err != nil {
			return nil, err
		}
		return splitDocuments(arg, data)
	}
	var files []string
	err = filepath.WalkDir(arg, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		ext := filepath.Ext(path)
		if !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var docs []document
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		found, err := splitDocuments(file, data)
		if err != nil {
			return nil, err
		}
		docs = append(docs, found...)
	}
	return docs, nil
}

func splitDocuments(name string, data []byte) ([]document, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []document
	for index := 0; ; index++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, index, err)
		}
		jsonData, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d is not YAML: %w", name, index, err)
		}
		if len(bytes.TrimSpace(jsonData)) == 0 || string(bytes.TrimSpace(jsonData)) == "null" {
			continue // an empty document, e.g. after a leading "---"
		}
		var head header
		if err := json.Unmarshal(jsonData, &head); err != nil {
			return nil, fmt.Errorf("%s: document %d is not a Kubernetes object: %w", name, index, err)
		}
		docs = append(docs, document{where: fmt.Sprintf("%s#%d", name, index), data: jsonData, head: head})
	}
}

// webhookContext builds the context the Knative webhooks validate in: feature flags and defaults
// from any Knative ConfigMaps among the inputs, over the release defaults, and "this is a create".
func webhookContext(docs []document) (context.Context, error) {
	eventingFeatures := map[string]string{}
	brokerDefaults := map[string]string{}
	servingMaps := map[string]map[string]string{}
	for _, doc := range docs {
		if doc.head.APIVersion != "v1" || doc.head.Kind != "ConfigMap" {
			continue
		}
		var cm corev1.ConfigMap
		if err := json.Unmarshal(doc.data, &cm); err != nil {
			return nil, fmt.Errorf("%s: %w", doc.where, err)
		}
		switch {
		case cm.Namespace == "knative-eventing" && cm.Name == "config-features":
			for k, v := range cm.Data {
				eventingFeatures[k] = v
			}
		case cm.Namespace == "knative-eventing" && cm.Name == eventingconfig.DefaultsConfigName:
			for k, v := range cm.Data {
				brokerDefaults[k] = v
			}
		case cm.Namespace == "knative-serving":
			if servingMaps[cm.Name] == nil {
				servingMaps[cm.Name] = map[string]string{}
			}
			for k, v := range cm.Data {
				servingMaps[cm.Name][k] = v
			}
		}
	}
	flags, err := feature.NewFlagsConfigFromMap(eventingFeatures)
	if err != nil {
		return nil, fmt.Errorf("knative-eventing/config-features: %w", err)
	}
	defaults, err := servingconfig.NewDefaultsConfigFromMap(servingMaps["config-defaults"])
	if err != nil {
		return nil, fmt.Errorf("knative-serving/config-defaults: %w", err)
	}
	features, err := servingconfig.NewFeaturesConfigFromMap(servingMaps["config-features"])
	if err != nil {
		return nil, fmt.Errorf("knative-serving/config-features: %w", err)
	}
	autoscaler, err := asconfig.NewConfigFromMap(servingMaps["config-autoscaler"])
	if err != nil {
		return nil, fmt.Errorf("knative-serving/config-autoscaler: %w", err)
	}
	ctx := context.Background()
	ctx = feature.ToContext(ctx, flags)
	if len(brokerDefaults) > 0 { // else the release defaults, as without the ConfigMap on a cluster
		brDefaults, err := eventingconfig.NewDefaultsConfigFromMap(brokerDefaults)
		if err != nil {
			return nil, fmt.Errorf("knative-eventing/%s: %w", eventingconfig.DefaultsConfigName, err)
		}
		ctx = eventingconfig.ToContext(ctx, &eventingconfig.Config{Defaults: brDefaults})
	}
	ctx = servingconfig.ToContext(ctx, &servingconfig.Config{Defaults: defaults, Features: features, Autoscaler: autoscaler})
	return apis.WithinCreate(ctx), nil
}

// check decodes one document into its Knative type, defaults it and validates it; it returns the
// document as the webhook would store it (defaulted; unchanged when it is not a Knative object).
func check(ctx context.Context, doc document) (status, detail string, stored []byte) {
	key := doc.head.APIVersion + "/" + doc.head.Kind
	newObject, known := constructors[key]
	if !known {
		group := strings.SplitN(doc.head.APIVersion, "/", 2)[0]
		if strings.HasSuffix(group, ".knative.dev") {
			return "FAIL", fmt.Sprintf(": %s is a Knative kind this checker does not know", key), doc.data
		}
		return "SKIP", " (not a Knative object)", doc.data
	}
	obj := newObject()
	decoder := json.NewDecoder(bytes.NewReader(doc.data))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(obj); err != nil {
		return "FAIL", fmt.Sprintf(": cannot decode into %s: %v", key, err), doc.data
	}
	obj.SetDefaults(ctx)
	stored, err := json.Marshal(obj)
	if err != nil {
		return "FAIL", fmt.Sprintf(": cannot encode the defaulted %s: %v", key, err), doc.data
	}
	fieldErrs := obj.Validate(ctx)
	if errs := fieldErrs.Filter(apis.ErrorLevel); errs != nil {
		return "FAIL", ": " + oneLine(errs.Error()), stored
	}
	if warnings := fieldErrs.Filter(apis.WarningLevel); warnings != nil {
		return "OK", " (warning: " + oneLine(warnings.Error()) + ")", stored
	}
	return "OK", "", stored
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
