output "bucket" {
  description = "The bucket's name."
  value       = aws_s3_bucket.reports.id
}

output "instance_profile" {
  description = "The instance profile every host runs with."
  value       = aws_iam_instance_profile.hosts.name
}

output "kms_key_arn" {
  description = "The test's KMS key: the bucket's, and the shared file system's."
  value       = aws_kms_key.reports.arn
}
