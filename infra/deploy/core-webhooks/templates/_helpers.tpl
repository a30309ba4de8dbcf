{{/* Name of the release's objects: <release>-core-webhooks, or the release name when it already says so. */}}
{{- define "core-webhooks.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "core-webhooks.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: core-webhooks
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "gateway"). */}}
{{- define "core-webhooks.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "core-webhooks.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "core-webhooks.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "core-webhooks.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The non-secret environment shared by every service, as a map of strings. */}}
{{- define "core-webhooks.config" -}}
KAFKA_BROKERS: {{ .Values.kafka.brokers | quote }}
KAFKA_TOPIC_PREFIX: {{ .Values.kafka.topicPrefix | quote }}
KAFKA_PARTITIONS: {{ .Values.kafka.partitions | toString | quote }}
GATEWAY_HOST: "0.0.0.0"
GATEWAY_PORT: {{ .Values.gateway.port | toString | quote }}
{{- range $name, $value := .Values.config }}
{{ $name }}: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* The deliveries topic the dispatcher's consumer group reads first (core/topics.ts). */}}
{{- define "core-webhooks.deliveriesTopic" -}}
{{ .Values.kafka.topicPrefix }}webhook.deliveries
{{- end -}}

{{- define "core-webhooks.dispatcherGroup" -}}
{{ .Values.kafka.topicPrefix }}webhook-dispatcher
{{- end -}}

{{/*
One service's Deployment: (dict "root" $ "component" "router" "values" .Values.router "entry" "dist/router/main.js"
"port" 9100 "portName" "metrics" "scrape" true). "port" and "portName" name the container's main port, which the
probes use. An optional "metricsPort" adds a second container port named metrics, for a service whose /metrics is
served apart from its main port (the gateway's API): the prometheus.io/port annotation then names it, else "port".
*/}}
{{- define "core-webhooks.deployment" -}}
{{- $root := .root -}}
{{- $v := .values -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "core-webhooks.fullname" $root }}-{{ .component }}
  labels:
    {{- include "core-webhooks.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  {{- if not .omitReplicas }}
  replicas: {{ $v.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 0
      maxSurge: 1
  selector:
    matchLabels:
      {{- include "core-webhooks.selectorLabels" (dict "root" $root "component" .component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "core-webhooks.labels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
      annotations:
        checksum/config: {{ include "core-webhooks.config" $root | sha256sum }}
        {{- if and .scrape $root.Values.metrics.annotations }}
        prometheus.io/scrape: "true"
        prometheus.io/port: {{ .metricsPort | default .port | toString | quote }}
        prometheus.io/path: /metrics
        {{- end }}
    spec:
      serviceAccountName: {{ include "core-webhooks.serviceAccountName" $root }}
      automountServiceAccountToken: {{ $root.Values.serviceAccount.automountServiceAccountToken }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ .component }}
          image: {{ include "core-webhooks.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args: [{{ .entry | quote }}]
          ports:
            - name: {{ .portName }}
              containerPort: {{ .port }}
              protocol: TCP
            {{- if .metricsPort }}
            - name: metrics
              containerPort: {{ .metricsPort }}
              protocol: TCP
            {{- end }}
          envFrom:
            - configMapRef:
                name: {{ include "core-webhooks.fullname" $root }}-config
            - secretRef:
                name: {{ required "secrets.existingSecret is required (a Secret holding SECRETS_KEY)" $root.Values.secrets.existingSecret }}
          {{- if or .extraEnv $v.env }}
          env:
            {{- range $name, $value := .extraEnv }}
            - name: {{ $name }}
              value: {{ $value | toString | quote }}
            {{- end }}
            {{- range $name, $value := $v.env }}
            - name: {{ $name }}
              value: {{ $value | toString | quote }}
            {{- end }}
          {{- end }}
          startupProbe:
            httpGet:
              path: /health
              port: {{ .portName }}
            periodSeconds: 2
            failureThreshold: 60
          livenessProbe:
            httpGet:
              path: /health
              port: {{ .portName }}
            periodSeconds: 10
            timeoutSeconds: 3
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /ready
              port: {{ .portName }}
            periodSeconds: 5
            timeoutSeconds: 3
            failureThreshold: 2
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if $v.affinity }}
      affinity:
        {{- toYaml $v.affinity | nindent 8 }}
      {{- else }}
      # Spread the replicas over nodes so one machine's loss takes at most one of them.
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "core-webhooks.selectorLabels" (dict "root" $root "component" .component) | nindent 14 }}
      {{- end }}
{{- end -}}

{{/* One service's PodDisruptionBudget: (dict "root" $ "component" "router" "values" .Values.router). */}}
{{- define "core-webhooks.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "core-webhooks.fullname" .root }}-{{ .component }}
  labels:
    {{- include "core-webhooks.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  {{- if hasKey .values.pdb "minAvailable" }}
  minAvailable: {{ .values.pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ .values.pdb.maxUnavailable | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "core-webhooks.selectorLabels" (dict "root" .root "component" .component) | nindent 6 }}
{{- end -}}
