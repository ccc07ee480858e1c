{{/*
STAND-IN of the real chart's _init-containers.tpl (vcluster 0.21.2): the init containers that copy
the control plane's binaries into the `binaries` volume, by distro (design.md section 5).
- k3s: one, `vcluster`, image rancher/k3s:<tag>, `/bin/sh -c "cp /bin/k3s /binaries/k3s"` (as in
  testbed/reference/vcluster-0.21.2/rendered-isolated.yaml, the real render);
- k8s: three: `vcluster-copy` (the syncer's image, `/bin/sh -c "cp /vcluster /binaries/vcluster"`:
  that image needs a shell), then `kube-controller-manager` and `kube-apiserver` from
  registry.k8s.io/<name>:<tag>, each copied by the `/binaries/vcluster cp` just put there; the tag
  is `controlPlane.distro.k8s.version` if set, else the host's Kubernetes version.
`controlPlane.advanced.defaultImageRegistry`, when set, replaces each image's registry, as the
real chart's `vcluster.image` helper does (templates/_helpers.tpl here).
*/}}

{{- define "vcluster.initContainers" -}}
{{- $distro := .Values.controlPlane.distro -}}
{{- if eq (include "vcluster.distro" .) "k3s" }}
- name: vcluster
  image: "{{ include "vcluster.registryPrefix" (dict "root" . "registry" $distro.k3s.image.registry) }}{{ $distro.k3s.image.repository }}:{{ $distro.k3s.image.tag }}"
  command:
    - /bin/sh
  args:
    - -c
    - "cp /bin/k3s /binaries/k3s"
  securityContext:
{{ toYaml $distro.k3s.securityContext | indent 4 }}
  volumeMounts:
    - name: binaries
      mountPath: /binaries
  resources:
{{ toYaml $distro.k3s.resources | indent 4 }}
{{- else }}
{{- $tag := $distro.k8s.version | default .Capabilities.KubeVersion.Version }}
- name: vcluster-copy
  image: {{ include "vcluster.image" . | quote }}
  command:
    - /bin/sh
  args:
    - -c
    - "cp /vcluster /binaries/vcluster"
  volumeMounts:
    - name: binaries
      mountPath: /binaries
{{- range $part := list "controllerManager" "apiServer" }}
{{- $component := index $distro.k8s $part }}
{{- if $component.enabled }}
- name: {{ $component.image.repository }}
  image: "{{ include "vcluster.registryPrefix" (dict "root" $ "registry" $component.image.registry) }}{{ $component.image.repository }}:{{ $tag }}"
  command:
    - /binaries/vcluster
  args:
    - cp
    - /usr/local/bin/{{ $component.image.repository }}
    - /binaries/{{ $component.image.repository }}
  securityContext:
{{ toYaml $distro.k8s.securityContext | indent 4 }}
  volumeMounts:
    - name: binaries
      mountPath: /binaries
  resources:
{{ toYaml $distro.k8s.resources | indent 4 }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
