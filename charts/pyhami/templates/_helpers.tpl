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

{{/* Who may change the scheduler-owned pod annotations once a pod exists, as a JSON list: the
scheduler's and the device plugin's ServiceAccounts, then trustedAnnotationWriters (a name
ending in ':' is a prefix). The one source of the extender's --trusted-annotation-writer flags
and of the ownership webhook's matchConditions. */}}
{{- define "pyhami.trustedWriters" -}}
{{- $ns := include "pyhami.namespace" . -}}
{{- $ours := list
  (printf "system:serviceaccount:%s:%s" $ns (include "pyhami.scheduler" .))
  (printf "system:serviceaccount:%s:%s" $ns (include "pyhami.devicePlugin" .)) -}}
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
