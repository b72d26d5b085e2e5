output "dns_name" {
  description = "The file system's NFS address (resolved in the VPC to the mount target of the host's zone)."
  value       = aws_efs_file_system.shared.dns_name
}
