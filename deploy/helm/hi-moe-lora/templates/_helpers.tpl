{{/* Names, labels and the values more than one template needs. */}}

{{- define "hml.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hml.controlPlane" -}}{{ include "hml.fullname" . }}-control-plane{{- end -}}
{{- define "hml.vllm" -}}{{ include "hml.fullname" . }}-vllm{{- end -}}
{{- define "hml.vllmHeadless" -}}{{ include "hml.fullname" . }}-vllm-pods{{- end -}}
{{- define "hml.epp" -}}{{ include "hml.fullname" . }}-epp{{- end -}}
{{- define "hml.pool" -}}{{ include "hml.fullname" . }}-pool{{- end -}}

{{- define "hml.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selector labels of one component: include with (dict "root" . "component" "vllm") */}}
{{- define "hml.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "hml.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
{{- end -}}

{{- define "hml.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.secrets.existingSecret }}
      key: {{ .key }}
{{- end -}}

{{/*
The control plane's upstreams (HI_MOE_LORA_VLLM_URLS): every vLLM pod by its stable name, or
the Gateway in inference-pool mode (its endpoint picker chooses the replica).
*/}}
{{- define "hml.vllmUrls" -}}
{{- if .Values.inferencePool.enabled -}}
{{- list .Values.inferencePool.gateway.url | toJson -}}
{{- else -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.vllm.replicas) -}}
{{- $urls = append $urls (printf "http://%s-%d.%s.%s.svc:%d" (include "hml.vllm" $) $i (include "hml.vllmHeadless" $) $.Release.Namespace (int $.Values.vllm.port)) -}}
{{- end -}}
{{- $urls | toJson -}}
{{- end -}}
{{- end -}}

{{/* The control plane's settings (registry/settings.py), for the Deployment and the Job. */}}
{{- define "hml.controlPlaneEnv" -}}
{{ include "hml.secretEnv" (dict "root" . "name" "HI_MOE_LORA_DATABASE_URL" "key" .Values.secrets.keys.databaseUrl) }}
{{ include "hml.secretEnv" (dict "root" . "name" "HI_MOE_LORA_ADMIN_TOKEN" "key" .Values.secrets.keys.adminToken) }}
{{ include "hml.secretEnv" (dict "root" . "name" "HI_MOE_LORA_RESOLVER_TOKEN" "key" .Values.secrets.keys.resolverToken) }}
{{ include "hml.secretEnv" (dict "root" . "name" "HI_MOE_LORA_API_KEY" "key" .Values.secrets.keys.vllmApiKey) }}
- name: HOME   # the root filesystem is read-only: caches (transformers, triton) go to /tmp
  value: /tmp
- name: HI_MOE_LORA_ARTIFACT_DIR
  value: /var/lib/hi-moe-lora/artifacts
- name: HI_MOE_LORA_BASE_MODEL
  value: {{ .Values.model.path | quote }}
- name: HI_MOE_LORA_MAX_LORA_RANK
  value: {{ .Values.controlPlane.maxLoraRank | quote }}
- name: HI_MOE_LORA_MAX_LORAS
  value: {{ .Values.controlPlane.maxLoras | quote }}
- name: HI_MOE_LORA_MAX_CPU_LORAS
  value: {{ .Values.vllm.maxCpuLoras | quote }}
- name: HI_MOE_LORA_VLLM_URLS
  value: {{ include "hml.vllmUrls" . | quote }}
- name: HI_MOE_LORA_ROUTING_POLICY
  value: {{ .Values.controlPlane.routingPolicy | quote }}
- name: HI_MOE_LORA_SOURCE_ROOTS
  value: {{ .Values.controlPlane.sourceRoots | toJson | quote }}
- name: HI_MOE_LORA_SOURCE_URL_PREFIXES
  value: {{ .Values.controlPlane.sourceUrlPrefixes | toJson | quote }}
- name: HI_MOE_LORA_REQUIRE_API_KEYS
  value: {{ .Values.controlPlane.requireApiKeys | quote }}
- name: HI_MOE_LORA_HOST
  value: "0.0.0.0"
- name: HI_MOE_LORA_PORT
  value: {{ .Values.controlPlane.port | quote }}
- name: HI_MOE_LORA_WORKERS
  value: {{ .Values.controlPlane.workers | quote }}
{{- with .Values.controlPlane.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}
