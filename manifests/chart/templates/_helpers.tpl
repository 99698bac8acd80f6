{{/* Labels on every object: the kustomize manifests' app.kubernetes.io/name, plus Helm's. */}}
{{- define "linkerd-config.labels" -}}
app.kubernetes.io/name: linkerd-config
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The pods' selector. Fixed (selectors are immutable): one controller per cluster. */}}
{{- define "linkerd-config.selector" -}}
app.kubernetes.io/name: linkerd-config
app.kubernetes.io/component: controller
{{- end }}

{{- define "linkerd-config.image" -}}
{{ .Values.controllerImage }}:{{ .Values.controllerImageVersion | default .Chart.AppVersion }}
{{- end }}

{{/* The webhook serving certificate's Secret data: given, kept from an earlier release, or
generated once. Rendered once per release (the Secret and the caBundle both include it). */}}
{{- define "linkerd-config.webhookCert" -}}
{{- $service := printf "linkerd-config-webhook.%s.svc" .Release.Namespace -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace "linkerd-config-webhook-cert" -}}
{{- if .Values.webhook.crtPEM -}}
tls.crt: {{ .Values.webhook.crtPEM | b64enc }}
tls.key: {{ required "webhook.keyPEM is required with webhook.crtPEM" .Values.webhook.keyPEM | b64enc }}
ca.crt: {{ .Values.webhook.caBundle | default .Values.webhook.crtPEM | b64enc }}
{{- else if and $existing (index $existing.data "ca.crt") -}}
tls.crt: {{ index $existing.data "tls.crt" }}
tls.key: {{ index $existing.data "tls.key" }}
ca.crt: {{ index $existing.data "ca.crt" }}
{{- else -}}
{{- $ca := genCA "linkerd-config-webhook-ca" 3650 -}}
{{- $cert := genSignedCert $service nil (list $service (printf "%s.cluster.local" $service)) 3650 $ca -}}
tls.crt: {{ $cert.Cert | b64enc }}
tls.key: {{ $cert.Key | b64enc }}
ca.crt: {{ $ca.Cert | b64enc }}
{{- end -}}
{{- end }}

{{/* webhookCert, generated at most once per render: the Secret, the webhook configurations
and the CRD's conversion webhook must all hold the same CA. */}}
{{- define "linkerd-config.webhookCertOnce" -}}
{{- if not (hasKey .Values.webhook "_renderedCert") -}}
{{- $_ := set .Values.webhook "_renderedCert" (include "linkerd-config.webhookCert" .) -}}
{{- end -}}
{{- .Values.webhook._renderedCert -}}
{{- end }}

{{/* How the API server learns the webhook server's CA, for the admission webhooks and the
CRD's conversion webhook alike: {annotations: cert-manager's CA injector, caBundle: base64},
either may be empty. */}}
{{- define "linkerd-config.caInjection" -}}
{{- $w := .Values.webhook -}}
{{- $annotations := dict -}}
{{- $caBundle := $w.caBundle | default "" | b64enc -}}
{{- if $w.certManager.enabled -}}
{{- $_ := set $annotations "cert-manager.io/inject-ca-from" (printf "%s/linkerd-config-serving-cert" .Release.Namespace) -}}
{{- $caBundle = "" -}}
{{- else if not $w.externalSecret -}}
{{- $caBundle = index (include "linkerd-config.webhookCertOnce" . | fromYaml) "ca.crt" -}}
{{- end -}}
{{- with $w.injectCaFrom -}}
{{- $_ := set $annotations "cert-manager.io/inject-ca-from" . -}}
{{- end -}}
{{- with $w.injectCaFromSecret -}}
{{- $_ := set $annotations "cert-manager.io/inject-ca-from-secret" . -}}
{{- end -}}
{{- toYaml (dict "annotations" $annotations "caBundle" $caBundle) -}}
{{- end }}

{{- define "linkerd-config.metricsPort" -}}
{{ if .Values.metrics.secure }}8443{{ else }}8080{{ end }}
{{- end }}
