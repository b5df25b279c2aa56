{{- define "operon.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "operon.labels" -}}
app.kubernetes.io/name: operon
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "operon.selectorLabels" -}}
app.kubernetes.io/name: operon
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
