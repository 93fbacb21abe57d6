{{/* Names and labels shared by every object of the release. */}}
{{- define "detok.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "detok.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The selector of one component: a subset of its pods' labels. */}}
{{- define "detok.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "detok.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The engine's request inbox as the frontends reach it: its Service, CURVE tcp. */}}
{{- define "detok.inbox" -}}
tcp://{{ include "detok.fullname" . }}-engine:{{ .Values.engine.inboxPort }}
{{- end -}}

{{- define "detok.prometheusAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end -}}

{{/* Volumes both pods mount: the keys Secret (the files `detok keygen` writes) and the temp dir. */}}
{{- define "detok.volumes" -}}
- name: keys
  secret:
    secretName: {{ .Values.keys.secretName }}
    defaultMode: 0440
    items:
      - {key: detok.key, path: detok.key}
      - {key: detok.key_secret, path: detok.key_secret}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- with .Values.modelVolume }}
- name: models
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "detok.volumeMounts" -}}
- {name: keys, mountPath: {{ .Values.keys.mountPath }}, readOnly: true}
- {name: tmp, mountPath: /tmp}
{{- if .Values.modelVolume }}
- {name: models, mountPath: /models, readOnly: true}
{{- end }}
{{- end -}}
