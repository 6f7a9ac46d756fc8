{{/* Names, labels and the values the operator's flags are built from. */}}

{{- define "agent-watchdog.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects. Names are limited to 63 characters, and suffixes such as
"-sandbox" or "-leader-election" are appended, so the base is cut to 45.
*/}}
{{- define "agent-watchdog.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "agent-watchdog.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agent-watchdog.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agent-watchdog.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "agent-watchdog.labels" -}}
helm.sh/chart: {{ include "agent-watchdog.chart" . }}
{{ include "agent-watchdog.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agent-watchdog
{{- end }}

{{/* Labels of the operator's pods; the Deployment, Service, PDB and policies select on them. */}}
{{- define "agent-watchdog.operatorSelectorLabels" -}}
{{ include "agent-watchdog.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "agent-watchdog.serviceAccountName" -}}
{{- $name := .Values.serviceAccount.name | default (include "agent-watchdog.fullname" .) }}
{{- /* The fencing policy treats every ServiceAccount named *-sandbox as a sandbox. */}}
{{- if hasSuffix "-sandbox" $name }}
{{- fail (printf "the operator's ServiceAccount name %q ends in -sandbox, which marks sandbox identities: choose another release name, fullnameOverride or serviceAccount.name" $name) }}
{{- end }}
{{- $name }}
{{- end }}

{{- define "agent-watchdog.sandboxClusterRoleName" -}}
{{- .Values.sandbox.clusterRole.name | default (printf "%s-sandbox" (include "agent-watchdog.fullname" .)) }}
{{- end }}

{{- define "agent-watchdog.fencingPolicyName" -}}
{{- printf "%s-sandbox-fencing" (include "agent-watchdog.fullname" .) }}
{{- end }}

{{- define "agent-watchdog.approverPolicyName" -}}
{{- printf "%s-approver" (include "agent-watchdog.fullname" .) }}
{{- end }}

{{- define "agent-watchdog.podSecurityPolicyName" -}}
{{- printf "%s-pod-security" (include "agent-watchdog.fullname" .) }}
{{- end }}

{{- define "agent-watchdog.shardPolicyName" -}}
{{- printf "%s-shard" (include "agent-watchdog.fullname" .) }}
{{- end }}

{{- define "agent-watchdog.metricsTlsSecretName" -}}
{{- .Values.metrics.tls.secretName | default (printf "%s-metrics-tls" (include "agent-watchdog.fullname" .)) }}
{{- end }}

{{- define "agent-watchdog.leaderElectionId" -}}
{{- .Values.leaderElection.id | default (printf "%s.watchdog.dev" (include "agent-watchdog.fullname" .)) }}
{{- end }}

{{- define "agent-watchdog.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
watchdog.defaults without the fields left empty, as the YAML the operator reads with
--defaults-file. Only nulls and empty strings are dropped: false and 0 are real settings.
watchdog.budgetDefaults, when set, goes in as it is, under `budget`.
*/}}
{{- define "agent-watchdog.watchdogDefaults" -}}
{{- $out := dict }}
{{- range $key, $value := .Values.watchdog.defaults }}
{{- if kindIs "map" $value }}
{{- $nested := dict }}
{{- range $field, $v := $value }}
{{- if not (or (kindIs "invalid" $v) (and (kindIs "string" $v) (eq $v ""))) }}
{{- $_ := set $nested $field $v }}
{{- end }}
{{- end }}
{{- if $nested }}
{{- $_ := set $out $key $nested }}
{{- end }}
{{- else if not (or (kindIs "invalid" $value) (and (kindIs "string" $value) (eq $value ""))) }}
{{- $_ := set $out $key $value }}
{{- end }}
{{- end }}
{{- with .Values.watchdog.budgetDefaults }}
{{- $_ := set $out "budget" . }}
{{- end }}
{{- if $out }}
{{- toYaml $out }}
{{- else }}
{{- "{}" }}
{{- end }}
{{- end }}

{{/*
What the operator is allowed to do in the namespaces it watches: exactly the requests it makes.
*/}}
{{- define "agent-watchdog.managerRules" -}}
- apiGroups: [watchdog.dev]
  resources: [agentruns]
  # patch: the operator's annotations (attempt, retry-after, backoff-reason), and the shard label
  # of a run the admission policy did not stamp (made with generateName, or before the policy).
  verbs: [get, list, watch, patch]
- apiGroups: [watchdog.dev]
  resources: [agentruns/status]
  # update is never sent by the operator, but a per-run sandbox Role grants it, and RBAC lets
  # the operator grant only what it holds itself.
  verbs: [get, patch, update]
- apiGroups: [watchdog.dev]
  resources: [agentruns/finalizers]
  # Sandbox pods and per-run identities are owned by their run with blockOwnerDeletion, which
  # clusters running the OwnerReferencesPermissionEnforcement admission plugin check against this.
  verbs: [update]
- apiGroups: [""]
  resources: [pods]
  # delete: hung sandboxes are killed, gracefully (watchdog.killGracePeriod), never force-deleted.
  # patch: the run's shard label, put on its pods made before the run had one, so that the shard's
  # holder, which watches pods by that label, sees them.
  verbs: [get, list, watch, create, delete, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create]
{{- if ne .Values.sandbox.serviceAccount "none" }}
- apiGroups: [""]
  resources: [serviceaccounts]
  # Sandbox ServiceAccounts are created when missing and never read or changed.
  verbs: [create]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [rolebindings{{ if eq .Values.sandbox.serviceAccount "run" }}, roles{{ end }}]
  verbs: [create]
{{- end }}
{{- if eq .Values.sandbox.serviceAccount "namespace" }}
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles]
  # Binding sandboxes to their ClusterRole, and no other.
  verbs: [bind]
  resourceNames: [{{ include "agent-watchdog.sandboxClusterRoleName" . }}]
{{- end }}
{{- end }}

{{/*
Checks the schema cannot express clearly: durations must be positive (the schema checks their
form). Included by the Deployment, so every render runs it.
*/}}
{{- define "agent-watchdog.validate" -}}
{{- $d := .Values.watchdog.defaults }}
{{- $durations := dict
  "resyncPeriod" .Values.resyncPeriod
  "watchSilenceLimit" .Values.watchSilenceLimit
  "stuckReconcileLimit" .Values.stuckReconcileLimit
  "metrics.serviceMonitor.interval" .Values.metrics.serviceMonitor.interval
  "metrics.serviceMonitor.scrapeTimeout" .Values.metrics.serviceMonitor.scrapeTimeout
  "watchdog.defaults.heartbeatTimeout" $d.heartbeatTimeout
  "watchdog.defaults.backoff.initial" $d.backoff.initial
  "watchdog.defaults.backoff.max" $d.backoff.max
  "watchdog.defaults.rateLimitBackoff.initial" $d.rateLimitBackoff.initial
  "watchdog.defaults.rateLimitBackoff.max" $d.rateLimitBackoff.max
  "watchdog.defaults.stall.timeout" $d.stall.timeout
  "watchdog.defaults.releaseAwaitingAfter" $d.releaseAwaitingAfter
  "watchdog.defaults.approvalTimeout" $d.approvalTimeout }}
{{- range $path, $value := $durations }}
{{- if and (kindIs "string" $value) (regexMatch "^([0]+([.][0]+)?(ns|us|µs|ms|s|m|h))+$" $value) }}
{{- fail (printf "%s: must be a positive duration such as 30s or 5m, not %s" $path $value) }}
{{- end }}
{{- end }}
{{- end }}
