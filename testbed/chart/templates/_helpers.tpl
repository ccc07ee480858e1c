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
{{- if $image.registry -}}{{ $image.registry }}/{{- end -}}{{ $image.repository }}:{{ $tag }}
{{- end -}}
