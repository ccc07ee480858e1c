"""kubeopera-tenants' own library: what every function shares (settings, naming, the Tenant model,
Helm values, CloudEvents, the Kubernetes and helm adapters, errors and their HTTP mapping, logs)."""
