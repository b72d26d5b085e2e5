variable "name" {
  description = "Prefix of every resource's Name tag."
  type        = string
}

variable "vpc_cidr" {
  description = "Address range of the VPC."
  type        = string
}

variable "ssh_cidr" {
  description = "The one CIDR allowed to SSH in."
  type        = string
}

variable "availability_zone" {
  description = "Availability zone of the hosts' subnet (all hosts in one: the test measures the software, not cross-zone links)."
  type        = string
}
