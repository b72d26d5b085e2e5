output "hosts" {
  description = "Each host: role, private and public address."
  value       = module.hosts.hosts
}

output "bucket" {
  description = "The bucket holding the wheel, the scenario and every host's reports (make scale-report BUCKET=...)."
  value       = module.reports_bucket.bucket
}

output "prometheus_targets" {
  description = "host:port of every metrics endpoint (NATS 8222, replicator 9108), for a Prometheus of your own."
  value = concat(
    [for name, h in var.hosts : "${local.addresses[name]}:8222" if h.role == "nats"],
    [for name, h in var.hosts : "${local.addresses[name]}:9108" if h.role == "replicator"],
  )
}
