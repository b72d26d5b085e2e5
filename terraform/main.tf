# The scale test of one scenario: a VPC, a bucket for the wheel and the reports, and one EC2
# instance per host of the plan (`make scale-plan`), each running its role as a systemd service.

data "aws_ssm_parameter" "ami" {
  name = var.ami_ssm_parameter
}

module "network" {
  source            = "./modules/network"
  name              = "sr-${var.scenario}"
  vpc_cidr          = var.vpc_cidr
  ssh_cidr          = var.ssh_cidr
  availability_zone = var.availability_zone
}

module "reports_bucket" {
  source = "./modules/reports_bucket"
  name   = "sr-${var.scenario}"
  # The wheel, the scenario, the locust load test (loadtests/) and the harness (the checker
  # host's `python -m harness scale check`); hosts run them from their working directory.
  uploads = merge(
    {
      "dist/stream_replicator.whl" = var.project_wheel
      "scenario.yaml"              = var.scenario_file
    },
    { for f in fileset("${path.module}/..", "{loadtests/*.py,harness/**/*.py}") : "code/${f}" => "${path.module}/../${f}" }
  )
}

locals {
  # Fixed private addresses: every host's command can name every other host before any exists.
  # Each host gets the whole table and puts the addresses into its command at boot ({host:NAME}).
  addresses = { for name, h in var.hosts : name => cidrhost(module.network.subnet_cidr, h.address_index) }
}

# With more than one Spark worker or a standby (the plan's shared_storage), every worker and
# replicator host mounts one file system for the checkpoints, state_store and in-flight record.
module "shared_storage" {
  source                  = "./modules/shared_storage"
  count                   = var.shared_storage ? 1 : 0
  name                    = "sr-${var.scenario}"
  vpc_id                  = module.network.vpc_id
  subnet_ids              = [module.network.subnet_id]
  hosts_security_group_id = module.network.security_group_id
  kms_key_arn             = module.reports_bucket.kms_key_arn
}

module "hosts" {
  source            = "./modules/hosts"
  # Their user data mounts the shared file system: its mount targets first.
  depends_on        = [module.shared_storage]
  name              = "sr-${var.scenario}"
  ami_id            = data.aws_ssm_parameter.ami.value
  subnet_id         = module.network.subnet_id
  security_group_id = module.network.security_group_id
  instance_profile  = module.reports_bucket.instance_profile
  ssh_key_name      = var.ssh_key_name
  root_volume_gb    = var.root_volume_gb
  bucket            = module.reports_bucket.bucket
  scenario          = var.scenario
  hadoop_aws        = var.hadoop_aws_package
  addresses         = local.addresses
  shared_dns        = var.shared_storage ? module.shared_storage[0].dns_name : ""
  hosts = {
    for name, h in var.hosts : name => {
      role          = h.role
      instance_type = h.instance_type
      private_ip    = local.addresses[name]
      command       = h.command
    }
  }
}
