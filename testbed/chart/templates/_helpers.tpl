{{- define "vcluster.labels" -}}
app: vcluster
chart: "{{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}"
release: {{ .Release.Name | quote }}
heritage: {{ .Release.Service | quote }}
{{- end -}}

{{- define "vcluster.selector" -}}
app: vcluster
release: {{ .Release.Name | quote }}
{{- end -}}

{{- define "vcluster.distro" -}}
{{- if .Values.controlPlane.distro.k3s.enabled -}}k3s{{- else -}}k8s{{- end -}}
{{- end -}}

{{- define "vcluster.image" -}}
{{- $image := .Values.controlPlane.statefulSet.image -}}
{{- $tag := $image.tag | default .Chart.AppVersion -}}
{{- include "vcluster.registryPrefix" (dict "root" . "registry" $image.registry) -}}{{ $image.repository }}:{{ $tag }}
{{- end -}}

{{/* The real chart's rule for an image's registry: defaultImageRegistry, when set, replaces it. */}}
{{- define "vcluster.registryPrefix" -}}
{{- $default := .root.Values.controlPlane.advanced.defaultImageRegistry -}}
{{- if $default -}}{{ $default }}/{{- else if .registry -}}{{ .registry }}/{{- end -}}
{{- end -}}

{{/*
Is a namespace policy of the real chart on? resourceQuota and limitRange: "true", or "auto" while
the other one is "true" (the two go together: a quota on limits needs defaults for pods that state
none); "false" never. Called with (list <this policy's enabled> <the other's enabled>).
*/}}
{{- define "vcluster.policyOn" -}}
{{- $this := toString (index . 0) -}}
{{- $other := toString (index . 1) -}}
{{- if and (ne $this "false") (or (eq $this "true") (eq $other "true")) -}}true{{- end -}}
{{- end -}}

{{/* The labels and annotations of a policy object: the chart's, then the policy's own. */}}
{{- define "vcluster.policyMetadata" -}}
{{- $root := index . 0 -}}
{{- $policy := index . 1 -}}
namespace: {{ $root.Release.Namespace }}
labels:
  {{- include "vcluster.labels" $root | nindent 2 }}
  {{- with $policy.labels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $policy.annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
