package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/pipeline-run/pipeline/pipeline/ops"
	"github.com/pipeline-run/pipeline/runner"
)

// TestDeployManifests checks deploy/ offline: each manifest decodes
// strictly into its Kubernetes API type (an unknown or misspelt field fails),
// the configuration in the ConfigMap is a valid pipeline once the pod's
// environment is applied, and the invariants the pipeline needs hold: the
// instance id is the pod's name, the probes ask the metrics port for the
// pipeline's real paths, the state volume is mounted at state.dir, the
// configuration is mounted where the command reads it, and the pod gets
// longer to stop than a checkpoint can take.
func TestDeployManifests(t *testing.T) {
	var cm corev1.ConfigMap
	var sts appsv1.StatefulSet
	var svc corev1.Service
	var pdb policyv1.PodDisruptionBudget
	for file, into := range map[string]any{"configmap.yaml": &cm, "statefulset.yaml": &sts, "service.yaml": &svc, "pdb.yaml": &pdb} {
		b, err := os.ReadFile(filepath.Join("..", "deploy", file))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("\n---")) {
			t.Fatalf("%s: one object per file", file)
		}
		if err := yaml.UnmarshalStrict(b, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if sts.Spec.Template.Spec.Containers == nil || len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("the StatefulSet has one container")
	}
	c := sts.Spec.Template.Spec.Containers[0]

	// The configuration, as a pod sees it.
	var cfgPath string
	if i := slices.Index(c.Args, "-c"); i >= 0 && i+1 < len(c.Args) {
		cfgPath = c.Args[i+1]
	}
	mount := func(name string) string {
		for _, m := range c.VolumeMounts {
			if m.Name == name {
				return m.MountPath
			}
		}
		return ""
	}
	var cfgVolume string
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			cfgVolume = v.Name
		}
	}
	if cfgVolume == "" || filepath.Join(mount(cfgVolume), "pipeline.yaml") != cfgPath {
		t.Fatalf("the command reads %q; the ConfigMap %s is mounted at %q", cfgPath, cm.Name, mount(cfgVolume))
	}
	env := map[string]string{}
	instanceFromPod := false
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" && e.Name == "PIPELINE_INSTANCE_ID" {
			instanceFromPod = true
			env[e.Name] = sts.Name + "-0"
			continue
		}
		env[e.Name] = e.Value
	}
	if !instanceFromPod {
		t.Fatal("PIPELINE_INSTANCE_ID must come from the pod's name (metadata.name): static membership and transactional ids need a stable, unique id per pod")
	}
	cfg, err := runner.Parse([]byte(cm.Data["pipeline.yaml"]), "configmap.yaml", func(k string) (string, bool) { v, ok := env[k]; return v, ok }, ops.NewRegistry())
	if err != nil {
		t.Fatalf("the ConfigMap's pipeline.yaml: %v", err)
	}
	if cfg.InstanceID != sts.Name+"-0" {
		t.Fatalf("instance id %q, want the pod's name", cfg.InstanceID)
	}

	// State on the pod's own volume.
	if cfg.State.Backend != "pebble" || len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("state backend %q with %d volume claim templates: pebble state belongs on a volume of its own", cfg.State.Backend, len(sts.Spec.VolumeClaimTemplates))
	}
	if m := mount(sts.Spec.VolumeClaimTemplates[0].Name); m == "" || filepath.Clean(m) != filepath.Clean(cfg.State.Dir) {
		t.Fatalf("state.dir %q, the claim %s mounted at %q", cfg.State.Dir, sts.Spec.VolumeClaimTemplates[0].Name, m)
	}

	// Probes on the metrics port, at the pipeline's paths.
	port := ""
	if _, p, ok := strings.Cut(cfg.Metrics.Listen, ":"); ok {
		port = p
	}
	var metricsPort corev1.ContainerPort
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			metricsPort = p
		}
	}
	if port == "" || metricsPort.ContainerPort == 0 || port != strconv.Itoa(int(metricsPort.ContainerPort)) {
		t.Fatalf("metrics.listen %q, container port %+v", cfg.Metrics.Listen, metricsPort)
	}
	for name, pr := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != name || (pr.HTTPGet.Port.String() != "metrics" && pr.HTTPGet.Port.IntValue() != int(metricsPort.ContainerPort)) {
			t.Fatalf("probe for %s: %+v", name, pr)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Fatalf("resources %+v: requests and a memory limit", c.Resources)
	}

	// Stopping: the open checkpoint commits within the grace period.
	grace := sts.Spec.Template.Spec.TerminationGracePeriodSeconds
	if need := cfg.Checkpoint.Interval + cfg.Checkpoint.Timeout; grace == nil || time.Duration(*grace)*time.Second <= need {
		t.Fatalf("terminationGracePeriodSeconds %v: must exceed checkpoint.interval + checkpoint.timeout = %s", grace, need)
	}

	// The Service and the budget find the pods.
	pods := sts.Spec.Template.Labels
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if pods[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if svc.Spec.ClusterIP != "None" || !matches(svc.Spec.Selector) || sts.Spec.ServiceName != svc.Name {
		t.Fatalf("the metrics Service must be headless, select the pods and be the StatefulSet's serviceName")
	}
	if pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels) || pdb.Spec.MaxUnavailable == nil {
		t.Fatalf("the PodDisruptionBudget must select the pods and bound how many are down")
	}
}
