{{- define "pyhami.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (default .Chart.Name .Values.nameOverride) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pyhami.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "pyhami.labels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "pyhami.annotations" -}}
{{- with .Values.global.annotations }}
annotations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "pyhami.selector" -}}
app.kubernetes.io/name: {{ default .root.Chart.Name .root.Values.nameOverride }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "pyhami.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
{{- end -}}

{{- define "pyhami.pullSecrets" -}}
{{- with .Values.global.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A HAMi-style image map {registry, repository, tag, pullPolicy} as "registry/repository:tag";
an empty tag falls back to .defaultTag. */}}
{{- define "pyhami.imageRef" -}}
{{- $tag := .image.tag | default .defaultTag -}}
{{- if .image.registry -}}
{{ printf "%s/%s:%s" .image.registry .image.repository $tag | quote }}
{{- else -}}
{{ printf "%s:%s" .image.repository $tag | quote }}
{{- end -}}
{{- end -}}

{{/* kube-scheduler's tag when none is set: the cluster's version, any +suffix stripped. */}}
{{- define "pyhami.kubeVersionTag" -}}
{{- regexReplaceAll "\\+.*$" .Capabilities.KubeVersion.Version "" -}}
{{- end -}}

{{/* Env entries from a values list (extraEnvs): values become strings, as a container's env
needs, even when `--set` made them numbers. */}}
{{- define "pyhami.env" -}}
{{- range . }}
- name: {{ .name | quote }}
  {{- if hasKey . "value" }}
  value: {{ .value | toString | quote }}
  {{- end }}
  {{- with .valueFrom }}
  valueFrom: {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* "true" or "false" from a bool or the strings "true"/"false" (HAMi's string defaults). */}}
{{- define "pyhami.bool" -}}
{{- if eq (toString .) "true" -}}true{{- else -}}false{{- end -}}
{{- end -}}

{{/* The scheduler's extender/webhook Service name and its TLS Secret. */}}
{{- define "pyhami.scheduler" -}}{{ include "pyhami.fullname" . }}-scheduler{{- end -}}
{{- define "pyhami.schedulerTLS" -}}{{ include "pyhami.fullname" . }}-scheduler-tls{{- end -}}
{{- define "pyhami.webhook" -}}{{ include "pyhami.fullname" . }}-webhook{{- end -}}
{{/* The device ConfigMap (HAMi's device-config.yaml) that the scheduler and the plugin mount. */}}
{{- define "pyhami.deviceConfig" -}}{{ include "pyhami.fullname" . }}-device{{- end -}}
{{/* The device plugin's DaemonSet, ServiceAccount and ConfigMap name. */}}
{{- define "pyhami.devicePlugin" -}}{{ include "pyhami.fullname" . }}-device-plugin{{- end -}}
{{/* The DRA driver's DaemonSet, ServiceAccount and ClusterRole name. */}}
{{- define "pyhami.draDriver" -}}{{ include "pyhami.fullname" . }}-dra-driver{{- end -}}
{{/* "true" when the DRA driver is deployed: DRA on (dra.mode selected or all) and the driver
enabled. */}}
{{- define "pyhami.draDriverOn" -}}
{{- if and (ne .Values.dra.mode "off") .Values.dra.driver.enabled -}}true{{- end -}}
{{- end -}}

{{/* The shell line a node component's container starts with: libvgpu goes onto the host so
that kubelet (device plugin) or the container runtime (DRA, through CDI) can mount it into
workloads, then the container's command runs. */}}
{{- define "pyhami.installLibvgpu" -}}
{{- $vgpu := printf "%s/vgpu" .Values.global.gpuHookPath -}}
cp -f /opt/pyhami/lib/libvgpu.so {{ $vgpu }}/libvgpu.so.{{ .Values.devicePlugin.libvgpuVersion }} && echo {{ $vgpu }}/libvgpu.so > {{ $vgpu }}/ld.so.preload && exec "$@"
{{- end -}}

{{/* The vGPU monitor container (devicePlugin.monitor.*), beside the device plugin and beside
the DRA driver. */}}
{{- define "pyhami.monitorContainer" -}}
- name: vgpu-monitor
  image: {{ include "pyhami.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command:
    - pyhami
    - monitor
    - --metrics-bind-address=:9394
    {{- if .Values.legacyMetrics }}
    - --legacy-metrics=true
    {{- end }}
    {{- range .Values.devicePlugin.monitor.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    - name: HOOK_PATH
      value: {{ printf "%s/vgpu" .Values.global.gpuHookPath }}
    - name: HAMI_RESYNC_INTERVAL
      value: {{ .Values.devicePlugin.monitor.resyncInterval | quote }}
    - name: NVIDIA_VISIBLE_DEVICES
      value: all
    - name: NVIDIA_MIG_MONITOR_DEVICES
      value: all
    {{- with .Values.devicePlugin.monitor.extraEnvs }}
    {{- include "pyhami.env" . | nindent 4 }}
    {{- end }}
  securityContext:
    runAsUser: 0
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
      add: ["SYS_ADMIN"]
  ports:
    - name: metrics
      containerPort: 9394
  resources: {{- toYaml .Values.devicePlugin.monitor.resources | nindent 4 }}
  volumeMounts:
    - name: ctrs
      mountPath: {{ .Values.devicePlugin.monitor.ctrPath }}
    - name: hami-tmp
      mountPath: /tmp/hami
{{- end -}}

{{/* The monitor container's host folders. */}}
{{- define "pyhami.monitorVolumes" -}}
- name: ctrs
  hostPath:
    path: {{ .Values.devicePlugin.monitor.ctrPath }}
    type: DirectoryOrCreate
- name: hami-tmp
  hostPath:
    path: /tmp/hami
    type: DirectoryOrCreate
{{- end -}}

{{/* Who may change the scheduler-owned pod annotations once a pod exists, as a JSON list: the
scheduler's and the device plugin's ServiceAccounts, the DRA driver's when it is deployed, then
trustedAnnotationWriters (a name ending in ':' is a prefix). The one source of the extender's --trusted-annotation-writer flags
and of the ownership webhook's matchConditions. */}}
{{- define "pyhami.trustedWriters" -}}
{{- $ns := include "pyhami.namespace" . -}}
{{- $ours := list
  (printf "system:serviceaccount:%s:%s" $ns (include "pyhami.scheduler" .))
  (printf "system:serviceaccount:%s:%s" $ns (include "pyhami.devicePlugin" .)) -}}
{{- if include "pyhami.draDriverOn" . -}}
{{- /* it labels the pods whose claims it prepares hami.io/vgpu-node, for the monitor */ -}}
{{- $ours = append $ours (printf "system:serviceaccount:%s:%s" $ns (include "pyhami.draDriver" .)) -}}
{{- end -}}
{{- concat $ours (.Values.scheduler.admissionWebhook.trustedAnnotationWriters | default list) | toJson -}}
{{- end -}}

{{/* The ownership webhook's CEL condition: true (call the webhook) unless a trusted writer
updates a pod. Strings are written as JSON, which is valid CEL. */}}
{{- define "pyhami.ownershipCondition" -}}
{{- $exact := list -}}
{{- $trusted := list -}}
{{- range include "pyhami.trustedWriters" . | fromJsonArray -}}
{{- if hasSuffix ":" . -}}
{{- $trusted = append $trusted (printf "request.userInfo.username.startsWith(%s)" (toJson .)) -}}
{{- else -}}
{{- $exact = append $exact . -}}
{{- end -}}
{{- end -}}
{{- $trusted = prepend $trusted (printf "request.userInfo.username in %s" (toJson $exact)) -}}
request.operation != 'UPDATE' || !({{ join " || " $trusted }})
{{- end -}}

{{/* A webhook's namespaceSelector: namespaces labelled hami.io/webhook=ignore, the
whitelisted ones and those in .also are never reviewed; the user's namespaceSelector terms are
added. None at all when manageNamespaceSelector is false (HAMi's switch for AKS). */}}
{{- define "pyhami.webhookNamespaces" -}}
{{- $hook := .root.Values.scheduler.admissionWebhook -}}
{{- if $hook.manageNamespaceSelector -}}
{{- $user := $hook.namespaceSelector | default dict }}
namespaceSelector:
  {{- with $user.matchLabels }}
  matchLabels: {{- toYaml . | nindent 4 }}
  {{- end }}
  matchExpressions:
    - key: hami.io/webhook
      operator: NotIn
      values: ["ignore"]
    {{- with concat ($hook.whitelistNamespaces | default list) .also }}
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{- toYaml . | nindent 8 }}
    {{- end }}
    {{- with $user.matchExpressions }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
{{- end -}}

{{/* A webhook's clientConfig: the scheduler Service (or customURL), at /webhook + suffix. */}}
{{- define "pyhami.webhookClient" -}}
clientConfig:
  {{- with .root.Values.scheduler.admissionWebhook.customURL }}
  {{- if .enabled }}
  url: https://{{ .host }}:{{ .port }}{{ .path }}{{ $.suffix }}
  {{- else }}
  service:
    name: {{ $.name }}
    namespace: {{ $.ns }}
    path: /webhook{{ $.suffix }}
    port: {{ $.root.Values.scheduler.service.httpPort }}
  {{- end }}
  {{- end }}
{{- end -}}

{{/* The device plugin's affinity: devicePlugin.affinity, and with dra.mode=selected each of its
required node-selector terms (one if it has none) also keeps off the DRA nodes, labelled
gpu.pyhami.io/mode=dra, where the DRA driver serves the GPUs. */}}
{{- define "pyhami.devicePluginAffinity" -}}
{{- $affinity := deepCopy (.Values.devicePlugin.affinity | default dict) -}}
{{- if eq .Values.dra.mode "selected" -}}
{{- $notDra := dict "key" "gpu.pyhami.io/mode" "operator" "NotIn" "values" (list "dra") -}}
{{- $node := $affinity.nodeAffinity | default dict -}}
{{- $required := $node.requiredDuringSchedulingIgnoredDuringExecution | default dict -}}
{{- $terms := list -}}
{{- range ($required.nodeSelectorTerms | default (list dict)) -}}
{{- $terms = append $terms (merge (dict "matchExpressions" (append (.matchExpressions | default list) $notDra)) .) -}}
{{- end -}}
{{- $_ := set $required "nodeSelectorTerms" $terms -}}
{{- $_ := set $node "requiredDuringSchedulingIgnoredDuringExecution" $required -}}
{{- $_ := set $affinity "nodeAffinity" $node -}}
{{- end -}}
{{- toYaml $affinity -}}
{{- end -}}
