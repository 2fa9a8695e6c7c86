{{/* The chart's ConfigMaps as named templates: rendered once as objects and once more, hashed,
into the checksum/* pod annotations (as HAMi's), so that `helm upgrade` with a changed config
rolls the pods that read it. */}}

{{/* kube-scheduler's KubeSchedulerConfiguration (HAMi's `hami-scheduler` ConfigMap). */}}
{{- define "pyhami.kubeSchedulerConfigMap" -}}
{{- $name := include "pyhami.scheduler" . -}}
{{- $ns := include "pyhami.namespace" . -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $name }}-newversion
  namespace: {{ $ns }}
  labels: {{- include "pyhami.labels" . | nindent 4 }}
data:
  config.yaml: |
    apiVersion: kubescheduler.config.k8s.io/v1
    kind: KubeSchedulerConfiguration
    leaderElection:
      leaderElect: {{ .Values.scheduler.leaderElect }}
      resourceName: {{ $name }}
      resourceNamespace: {{ $ns }}
    profiles:
      - schedulerName: {{ .Values.schedulerName }}
    extenders:
      # The extender runs in the same pod, so kube-scheduler reaches it on localhost.
      - urlPrefix: "https://127.0.0.1:{{ .Values.scheduler.extender.port }}"
        filterVerb: filter
        bindVerb: bind
        preemptVerb: preempt
        nodeCacheCapable: true
        weight: 1
        httpTimeout: 30s
        enableHTTPS: true
        tlsConfig:
          insecure: true
          {{- if .Values.scheduler.extender.clientAuth.enabled }}
          # The extender answers only callers with a certificate from its client CA.
          certFile: /extender-client/tls.crt
          keyFile: /extender-client/tls.key
          {{- end }}
        managedResources:
          {{- range (list .Values.resourceName .Values.resourceMem .Values.resourceMemPercentage .Values.resourceCores .Values.resourcePriority) }}
          - name: {{ . }}
            ignoredByScheduler: true
          {{- end }}
        ignorable: false
{{- end -}}

{{/* The device ConfigMap both the scheduler and the device plugin read (HAMi's
device-config.yaml): device-config.content verbatim when set, else built from the values. */}}
{{- define "pyhami.deviceConfigMap" -}}
{{- $content := index .Values "device-config" "content" -}}
{{- $nvidia := .Values.devices.nvidia -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "pyhami.deviceConfig" . }}
  namespace: {{ include "pyhami.namespace" . }}
  labels: {{- include "pyhami.labels" . | nindent 4 }}
data:
  {{- if $content }}
  device-config.yaml: {{ $content | toJson }}
  {{- else }}
  device-config.yaml: |
    nvidia:
      resourceCountName: {{ .Values.resourceName }}
      resourceMemoryName: {{ .Values.resourceMem }}
      resourceMemoryPercentageName: {{ .Values.resourceMemPercentage }}
      resourceCoreName: {{ .Values.resourceCores }}
      resourcePriorityName: {{ .Values.resourcePriority }}
      overwriteEnv: {{ include "pyhami.bool" .Values.scheduler.overwriteEnv }}
      defaultMemory: {{ $nvidia.defaultMemory | int64 }}
      defaultCores: {{ $nvidia.defaultCores | int64 }}
      defaultGPUNum: {{ $nvidia.defaultGPUNum | int64 }}
      memoryFactor: {{ $nvidia.memoryFactor | int64 }}
      preConfiguredDeviceMemory: {{ .Values.devicePlugin.preConfiguredDeviceMemory | int64 }}
      deviceSplitCount: {{ .Values.devicePlugin.deviceSplitCount | int64 }}
      deviceMemoryScaling: {{ .Values.devicePlugin.deviceMemoryScaling }}
      deviceCoreScaling: {{ .Values.devicePlugin.deviceCoreScaling }}
      enableNumaTopology: {{ .Values.devicePlugin.enableNumaTopology }}
      gpuCorePolicy: {{ $nvidia.gpuCorePolicy | quote }}
      libCudaLogLevel: {{ $nvidia.libCudaLogLevel | int64 }}
      {{- with $nvidia.migProfileAllowlist }}
      migProfileAllowlist:
        {{- range . }}
        - models: {{ .models | toJson }}
          profiles: {{ .profiles | toJson }}
        {{- end }}
      {{- end }}
  {{- end }}
{{- end -}}

{{/* The device plugin's per-node config.json (HAMi's `hami-device-plugin` ConfigMap). */}}
{{- define "pyhami.nodeConfigMap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "pyhami.devicePlugin" . }}
  namespace: {{ include "pyhami.namespace" . }}
  labels: {{- include "pyhami.labels" . | nindent 4 }}
data:
  config.json: {{ .Values.devicePlugin.nodeConfiguration.config | quote }}
{{- end -}}
