{{/*
The chart holds no copy of the shipped manifests: files/ links to packaging/kubernetes,
packaging/prometheus and packaging/grafana, and the templates read those files as they ship
(.Files.Get), object by object, adding only Helm's labels below (and, for CRDs, the keep policy).
*/}}

{{- define "inplaced.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Every object of one shipped multi-document YAML file, as it ships, with Helm's labels added
(a label the file sets wins) and, with "keep", helm.sh/resource-policy: keep.
Arguments: (dict "root" $ "file" "files/kubernetes/x.yaml" "keep" false)
*/}}
{{- define "inplaced.shipped" -}}
{{- $root := .root -}}
{{- $text := $root.Files.Get .file -}}
{{- if not $text -}}
{{- fail (printf "%s is missing or empty: the chart's files/ must link to packaging/" .file) -}}
{{- end -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $text -1 -}}
{{- $object := fromYaml $doc -}}
{{- if hasKey $object "Error" -}}
{{- fail (printf "%s: %s" $.file $object.Error) -}}
{{- end -}}
{{- if $object }}
{{- $metadata := $object.metadata | default dict -}}
{{- $labels := merge (dict) ($metadata.labels | default dict) (include "inplaced.labels" $root | fromYaml) -}}
{{- $_ := set $metadata "labels" $labels -}}
{{- if $.keep -}}
{{- $annotations := $metadata.annotations | default dict -}}
{{- $_ := set $annotations "helm.sh/resource-policy" "keep" -}}
{{- $_ := set $metadata "annotations" $annotations -}}
{{- end -}}
{{- $_ := set $object "metadata" $metadata }}
---
# Source: {{ $.file | trimPrefix "files/" }}
{{ toYaml $object }}
{{- end -}}
{{- end -}}
{{- end }}

{{- define "inplaced.namespace" -}}
{{- .namespace | default .root.Release.Namespace -}}
{{- end }}

{{/* The monitoring objects' name prefix: the release's name, with the chart's unless it has it. */}}
{{- define "inplaced.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end }}
