# Sizes and counts come from `make scale-plan SCENARIO=...`, which writes them to
# terraform.tfvars.json; the defaults here are the plan of scenarios/million-realtime.yaml.

variable "region" {
  description = "AWS region of the test (the price table in prices.yaml is for us-east-1)."
  type        = string
  default     = "us-east-1"
}

variable "availability_zone" {
  description = "Availability zone of every host (one zone: cross-zone traffic would be measured too)."
  type        = string
  default     = "us-east-1a"
}

variable "scenario" {
  description = "Name of the scenario the hosts run (tags, report keys)."
  type        = string
  default     = "million-realtime"
}

variable "ssh_cidr" {
  description = "The one CIDR allowed to SSH to the hosts, e.g. your address/32."
  type        = string
  validation {
    condition     = can(cidrhost(var.ssh_cidr, 0)) && var.ssh_cidr != "0.0.0.0/0"
    error_message = "ssh_cidr: give one address range (e.g. 203.0.113.7/32), not 0.0.0.0/0."
  }
}

variable "ssh_key_name" {
  description = "Name of an existing EC2 key pair for SSH (empty: none, use SSM)."
  type        = string
  default     = ""
}

variable "vpc_cidr" {
  description = "Address range of the test's VPC; hosts get fixed addresses in its first subnet."
  type        = string
  default     = "10.42.0.0/16"
}

variable "ami_ssm_parameter" {
  description = "SSM parameter naming the AMI (Debian 12, amd64)."
  type        = string
  default     = "/aws/service/debian/release/12/latest/amd64"
}

variable "root_volume_gb" {
  description = "Root disk of each host (NATS servers keep their streams on it)."
  type        = number
  default     = 100
}

variable "project_wheel" {
  description = "Path of the project's wheel (`make dist`), uploaded to the bucket for every host."
  type        = string
  default     = "../dist/stream_replicator-0.1.0-py3-none-any.whl"
}

variable "scenario_file" {
  description = "Path of the scenario file, uploaded to the bucket for every host."
  type        = string
  default     = "../scenarios/scale/million-realtime.yaml"
}

variable "hadoop_aws_package" {
  description = "Maven coordinates of Hadoop's S3 connector (s3a) for the replicators' checkpoints; its version must be the Hadoop pyspark bundles (make scale-plan writes it)."
  type        = string
  default     = "org.apache.hadoop:hadoop-aws:3.5.0"
}

variable "shared_storage" {
  description = "An EFS file system for the replicators' checkpoints and state, mounted on every Spark worker and replicator host (make scale-plan sets it when the plan has more than one Spark worker or a standby)."
  type        = bool
  default     = false
}

variable "hosts" {
  description = "Every host of the plan: role, instance type, address offset in the subnet, and the command its service runs ({host:NAME} stands for another host's address)."
  type = map(object({
    role          = string
    instance_type = string
    address_index = number
    command       = string
  }))
}
