variable "name" {
  description = "Prefix of every host's Name tag."
  type        = string
}

variable "ami_id" {
  description = "AMI of every host (Debian 12)."
  type        = string
}

variable "subnet_id" {
  description = "Subnet the hosts are in."
  type        = string
}

variable "security_group_id" {
  description = "Security group of every host."
  type        = string
}

variable "instance_profile" {
  description = "Instance profile (the bucket's role)."
  type        = string
}

variable "ssh_key_name" {
  description = "EC2 key pair for SSH; empty for none."
  type        = string
}

variable "root_volume_gb" {
  description = "Root disk size."
  type        = number
}

variable "bucket" {
  description = "Bucket with the wheel and scenario; reports go to reports/<host>/ in it."
  type        = string
}

variable "scenario" {
  description = "Scenario name (reports' prefix)."
  type        = string
}

variable "hadoop_aws" {
  description = "Maven coordinates of hadoop-aws, which Spark fetches to write checkpoints through s3a."
  type        = string
}

variable "addresses" {
  description = "Every host's private address, by host name, for the {host:NAME} of commands."
  type        = map(string)
}

variable "hosts" {
  description = "The hosts: role, instance type, private address and the command its service runs."
  type = map(object({
    role          = string
    instance_type = string
    private_ip    = string
    command       = string
  }))
}

variable "shared_dns" {
  description = "NFS address of the shared file system every Spark worker and replicator host mounts at /mnt/sr-shared (empty: none; checkpoints go to the bucket through s3a)."
  type        = string
  default     = ""
}
