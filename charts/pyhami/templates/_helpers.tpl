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
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The scheduler's extender/webhook Service name and its TLS Secret. */}}
{{- define "pyhami.scheduler" -}}{{ include "pyhami.fullname" . }}-scheduler{{- end -}}
{{- define "pyhami.schedulerTLS" -}}{{ include "pyhami.fullname" . }}-scheduler-tls{{- end -}}
{{- define "pyhami.webhook" -}}{{ include "pyhami.fullname" . }}-webhook{{- end -}}
{{/* The device plugin's DaemonSet, ServiceAccount and ConfigMap name. */}}
{{- define "pyhami.devicePlugin" -}}{{ include "pyhami.fullname" . }}-device-plugin{{- end -}}

{{/* A webhook's namespaceSelector: namespaces labelled hami.io/webhook=ignore, the
whitelisted ones and those in .also are never reviewed. */}}
{{- define "pyhami.webhookNamespaces" -}}
namespaceSelector:
  matchExpressions:
    - key: hami.io/webhook
      operator: NotIn
      values: ["ignore"]
    {{- with concat (.root.Values.scheduler.admissionWebhook.whitelistNamespaces | default list) .also }}
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{- toYaml . | nindent 8 }}
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
