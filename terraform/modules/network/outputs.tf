output "subnet_id" {
  description = "The hosts' subnet."
  value       = aws_subnet.hosts.id
}

output "subnet_cidr" {
  description = "The hosts' subnet range (their fixed addresses are in it)."
  value       = aws_subnet.hosts.cidr_block
}

output "security_group_id" {
  description = "The group every host is in."
  value       = aws_security_group.hosts.id
}

output "vpc_id" {
  description = "The test's VPC."
  value       = aws_vpc.this.id
}
