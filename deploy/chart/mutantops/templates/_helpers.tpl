{{/*
The chart's name: app.kubernetes.io/name of every object, and the Deployment's and Service's
selector (as in deploy/operator.yml, so the chart can take over a `kubectl apply` install:
a Deployment's selector cannot change).
*/}}
{{- define "mutantops.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The fullname every object is named after: the release name when it contains the chart's name
(release `mutantops` gives `mutantops`, the names of operator.yml), else
<release>-<chart name>. Cluster-scoped objects carry it, so releases do not collide.
*/}}
{{- define "mutantops.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Deployment <fullname>-operator. */}}
{{- define "mutantops.deploymentName" -}}
{{- printf "%s-operator" (include "mutantops.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Service <fullname>-api. */}}
{{- define "mutantops.serviceName" -}}
{{- printf "%s-api" (include "mutantops.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Role and RoleBinding <fullname>-leader-election. */}}
{{- define "mutantops.leaderElectionName" -}}
{{- printf "%s-leader-election" (include "mutantops.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* ValidatingAdmissionPolicy and binding <fullname>-services. */}}
{{- define "mutantops.servicePolicyName" -}}
{{- printf "%s-services" (include "mutantops.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* ValidatingAdmissionPolicy and binding <fullname>-secrets. */}}
{{- define "mutantops.secretPolicyName" -}}
{{- printf "%s-secrets" (include "mutantops.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The selector: what operator.yml selects on. */}}
{{- define "mutantops.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mutantops.name" . }}
{{- end }}

{{/* The pods' labels: the selector and the release. */}}
{{- define "mutantops.podLabels" -}}
{{ include "mutantops.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object: operator.yml's, and Helm's own. */}}
{{- define "mutantops.labels" -}}
{{ include "mutantops.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The operator's image: repository:tag, the tag defaulting to appVersion. */}}
{{- define "mutantops.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
