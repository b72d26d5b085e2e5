variable "name" {
  description = "Prefix of the resources' names."
  type        = string
}

variable "vpc_id" {
  description = "The test's VPC."
  type        = string
}

variable "subnet_ids" {
  description = "The hosts' subnets: one mount target in each."
  type        = list(string)
}

variable "hosts_security_group_id" {
  description = "The group every host is in: the only one NFS is open to."
  type        = string
}

variable "kms_key_arn" {
  description = "The test's KMS key (the reports bucket's): the file system is encrypted with it."
  type        = string
}
