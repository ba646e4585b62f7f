{{/* Names: <release>-waybill, or the release name when it already says waybill. */}}
{{- define "waybill.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The four gRPC services: their port; health = port + 10, metrics = port + 20. */}}
{{- define "waybill.grpcPorts" -}}
admission: 50151
runner: 50152
journal: 50153
delivery: 50154
{{- end -}}

{{- define "waybill.selector" -}}
app.kubernetes.io/name: waybill
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "waybill.labels" -}}
{{ include "waybill.selector" . }}
app.kubernetes.io/part-of: waybill
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "waybill.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "waybill.secretName" -}}
{{ .Values.secrets.existingSecret | default (printf "%s-secrets" (include "waybill.fullname" .)) }}
{{- end -}}

{{- define "waybill.projectConfigMap" -}}
{{ .Values.project.existingConfigMap | default (printf "%s-project" (include "waybill.fullname" .)) }}
{{- end -}}

{{- define "waybill.hasProject" -}}
{{- if or .Values.project.existingConfigMap .Values.project.config .Values.project.langgraph -}}true{{- end -}}
{{- end -}}

{{/* One environment variable from the Secret. */}}
{{- define "waybill.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "waybill.secretName" .root }}
      key: {{ .key }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end -}}

{{- define "waybill.envFrom" -}}
envFrom:
  - configMapRef:
      name: {{ include "waybill.fullname" . }}-env
{{- end -}}

{{- define "waybill.podSecurity" -}}
automountServiceAccountToken: false  # never talks to the Kubernetes API
enableServiceLinks: false  # no injected *_SERVICE_HOST/*_PORT variables
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001  # the TLS key (0440) and the workspaces are the group's
  seccompProfile:
    type: RuntimeDefault
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "waybill.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* /tmp, the TLS certificate, the project files: mounts and volumes. */}}
{{- define "waybill.mounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/waybill/tls
  readOnly: true
{{- end }}
{{- if include "waybill.hasProject" . }}
- name: project
  mountPath: /etc/waybill/project
  readOnly: true
{{- end }}
{{- end -}}

{{- define "waybill.volumes" -}}
- name: tmp
  emptyDir: {}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .Values.tls.secretName }}
    defaultMode: 0440
{{- end }}
{{- if include "waybill.hasProject" . }}
- name: project
  configMap:
    name: {{ include "waybill.projectConfigMap" . }}
{{- end }}
{{- end -}}

{{/* The init container that waits for the migration Job's work. */}}
{{- define "waybill.waitForSchema" -}}
initContainers:
  - name: wait-for-schema
    image: {{ include "waybill.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command: ["waybill", "migrate", "--wait"]
    {{- include "waybill.envFrom" . | nindent 4 }}
    env:
      {{- include "waybill.secretEnv" (dict "root" . "name" "WAYBILL_DATABASE_URL" "key" "database-url") | nindent 6 }}
    resources:
      requests: {cpu: 10m, memory: 96Mi}
      limits: {cpu: 500m, memory: 256Mi}
    {{- include "waybill.containerSecurity" . | nindent 4 }}
    volumeMounts:
      {{- include "waybill.mounts" . | nindent 6 }}
{{- end -}}

{{/* Checksums that roll the pods when their configuration changes. */}}
{{- define "waybill.checksums" -}}
checksum/env: {{ include (print .Template.BasePath "/config.yaml") . | sha256sum }}
checksum/project: {{ include (print .Template.BasePath "/project.yaml") . | sha256sum }}
{{- end -}}
