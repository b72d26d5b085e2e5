# A file system every Spark worker and replicator host mounts at /mnt/sr-shared, for a plan with
# more than one Spark worker or a standby replicator: the replicators' checkpoints (offsets and
# the sampled streams' sender state, written by whichever worker runs a task), state_store and
# the in-flight record must then be reached from every one of those hosts. (s3a would do for the
# checkpoints, but its connector is fetched at boot and has never run on the machines this
# project is tested on; NFS needs nothing but the kernel's client.)

resource "aws_efs_file_system" "shared" {
  #checkov:skip=CKV2_AWS_18:The state of a scale test lives for hours and is rebuilt by running it again; a backup plan would outlive it
  creation_token   = "${var.name}-shared"
  encrypted        = true
  kms_key_id       = var.kms_key_arn
  performance_mode = "generalPurpose"
  # Billed per GB moved, with no provisioning: the test writes in bursts at each batch.
  throughput_mode = "elastic"
  tags            = { Name = "${var.name}-shared" }
}

# Nothing else reaches the file system: NFS from the test's hosts only.
resource "aws_security_group" "shared" {
  name        = "${var.name}-shared"
  description = "NFS to the scale test's shared file system"
  vpc_id      = var.vpc_id
  tags        = { Name = "${var.name}-shared" }
}

resource "aws_vpc_security_group_ingress_rule" "nfs" {
  security_group_id            = aws_security_group.shared.id
  referenced_security_group_id = var.hosts_security_group_id
  ip_protocol                  = "tcp"
  from_port                    = 2049
  to_port                      = 2049
  description                  = "NFS from the test's hosts"
}

resource "aws_vpc_security_group_egress_rule" "hosts_nfs" {
  security_group_id            = var.hosts_security_group_id
  referenced_security_group_id = aws_security_group.shared.id
  ip_protocol                  = "tcp"
  from_port                    = 2049
  to_port                      = 2049
  description                  = "NFS to the shared file system"
}

# One mount target in each of the hosts' subnets.
resource "aws_efs_mount_target" "shared" {
  for_each        = toset(var.subnet_ids)
  file_system_id  = aws_efs_file_system.shared.id
  subnet_id       = each.value
  security_groups = [aws_security_group.shared.id]
}
