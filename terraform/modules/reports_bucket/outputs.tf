output "bucket" {
  description = "The bucket's name."
  value       = aws_s3_bucket.reports.id
}

output "instance_profile" {
  description = "The instance profile every host runs with."
  value       = aws_iam_instance_profile.hosts.name
}
