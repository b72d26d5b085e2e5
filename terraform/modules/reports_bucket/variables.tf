variable "name" {
  description = "Prefix of the bucket's name (a random suffix follows) and of the role's."
  type        = string
}

variable "uploads" {
  description = "Files to put in the bucket before the hosts start: key => local path."
  type        = map(string)
}

variable "keep_days" {
  description = "Days the reports are kept before they expire."
  type        = number
  default     = 30
}
